#include "completion_pool.h"

namespace bigbatch::torch_backend {

CompletionPool::~CompletionPool() {
  std::vector<std::thread> threads;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    threads.swap(threads_);
  }
  wake_.notify_all();
  for (std::thread& t : threads) t.join();
}

void CompletionPool::submit(std::function<void()> task) {
  const std::lock_guard<std::mutex> lock(mutex_);
  tasks_.push_back(std::move(task));
  if (idle_ >= static_cast<int>(tasks_.size()) ||
      static_cast<int>(threads_.size()) >= kMaxThreads) {
    wake_.notify_one();
    return;
  }
  threads_.emplace_back([this] { work(); });
}

int CompletionPool::threads() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int>(threads_.size());
}

void CompletionPool::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    ++idle_;
    wake_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) return;  // stopping, nothing left
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace bigbatch::torch_backend
