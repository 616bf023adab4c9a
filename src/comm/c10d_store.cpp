#include "bigbatch/comm/c10d_store.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

class C10dStore : public KeyValueStore {
 public:
  C10dStore(c10::intrusive_ptr<c10d::Store> store, std::string where)
      : store_(std::move(store)), where_(std::move(where)) {}

  void set(const std::string& key, const std::string& value) override {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  }

  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    try {
      store_->wait({key}, timeout);
    } catch (const std::exception& e) {
      BIGBATCH_THROW(TimeoutError, "key '{}' did not appear in the store at {} within {} ms: {}",
                     key, where_, timeout.count(), e.what());
    }
    const std::vector<uint8_t> v = store_->get(key);
    return std::string(v.begin(), v.end());
  }

  bool check(const std::string& key) override { return store_->check({key}); }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }
  std::string describe() const override { return "store at " + where_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::string where_;
};

}  // namespace

std::unique_ptr<KeyValueStore> wrapC10dStore(c10::intrusive_ptr<c10d::Store> store,
                                             std::string where) {
  BIGBATCH_REQUIRE(store, InvalidArgument, "no store given for the rendezvous");
  return std::make_unique<C10dStore>(std::move(store), std::move(where));
}

}  // namespace bigbatch
