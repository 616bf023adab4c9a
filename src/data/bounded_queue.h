// A blocking FIFO of bounded capacity with close(): the link between two
// pipeline stages. push() waits while full and fails once closed; pop() waits
// while empty and returns nothing once closed and drained. Internal to
// src/data. Thread-safe (many producers, many consumers).
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

namespace bigbatch::data_detail {

template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}

  bool push(T item) {
    std::unique_lock<std::mutex> lock(mu_);
    notFull_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    notEmpty_.notify_one();
    return true;
  }

  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mu_);
    notEmpty_.wait(lock, [&] { return closed_ || !items_.empty(); });
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    notFull_.notify_one();
    return item;
  }

  // Producers are done (drain, then pop() returns nothing), or — with
  // `discard` — everyone stops now and queued items are dropped.
  void close(bool discard = false) {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    if (discard) items_.clear();
    notEmpty_.notify_all();
    notFull_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable notEmpty_, notFull_;
  std::deque<T> items_;
  size_t capacity_;
  bool closed_ = false;
};

}  // namespace bigbatch::data_detail
