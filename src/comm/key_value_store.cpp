#include "bigbatch/comm/key_value_store.h"

#include "bigbatch/common/error.h"

namespace bigbatch {

void InMemoryStore::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mutex_);
  values_[key] = value;
  changed_.notify_all();
}

std::string InMemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; })) {
    BIGBATCH_THROW(TimeoutError, "key '{}' did not appear in the {} within {} ms", key,
                   describe(), timeout.count());
  }
  return values_[key];
}

int64_t InMemoryStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t value = (values_.count(key) ? std::stoll(values_[key]) : 0) + delta;
  values_[key] = std::to_string(value);
  changed_.notify_all();
  return value;
}

bool InMemoryStore::check(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  return values_.count(key) > 0;
}

}  // namespace bigbatch
