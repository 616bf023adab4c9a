#include "bigbatch/ddp/comm_thread.h"

#include "bigbatch/comm/peer_wait.h"

namespace bigbatch {

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t CommThread::submit(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back({std::move(task), false});
  cv_.notify_all();
  return ++submitted_;
}

void CommThread::waitFor(uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return completed_ >= ticket || error_; });
  if (error_) std::rethrow_exception(error_);
}

void CommThread::waitAll() {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket = submitted_;
  }
  waitFor(ticket);
}

void CommThread::run(std::function<void()> task) { waitFor(submit(std::move(task))); }

void CommThread::runAfterFailure(std::function<void()> task) {
  std::unique_lock<std::mutex> lock(mutex_);
  queue_.push_back({[&task] {
                      try {
                        task();
                      } catch (...) {
                      }
                    },
                    true});
  const uint64_t ticket = ++submitted_;
  cv_.notify_all();
  cv_.wait(lock, [&] { return completed_ >= ticket; });
}

void CommThread::loop() {
  // Its waits for peers sleep instead of yielding: on CPU training this
  // thread shares its rank's cores with backward (comm/peer_wait.h).
  PeerWait::setBackground(true);
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    bool failed = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failed = static_cast<bool>(error_);
    }
    if (!failed || task.evenAfterFailure) {
      try {
        task.fn();
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        error_ = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++completed_;
    }
    cv_.notify_all();
  }
}

}  // namespace bigbatch
