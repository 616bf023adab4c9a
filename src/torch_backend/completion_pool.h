// Where the backend completes its futures: never on the thread that runs
// the collectives. A future's callbacks run on the thread that marks it
// complete, and DDP's PowerSGD hook blocks inside one on a collective of
// its own (a nested get_future().wait()): completed on the communication
// thread, that collective could never run. Each completion goes to an idle
// thread of this pool, or to a new one when all are busy (a cached pool:
// one callback blocked in a nested wait does not hold up the next
// completion), up to kMaxThreads, beyond which completions queue.
//
// Threading: submit() from any thread; the destructor runs what is queued
// and joins every thread (the caller must not hold a lock a callback
// needs, e.g. Python's GIL: see ProcessGroupBigbatch's destructor).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace bigbatch::torch_backend {

class CompletionPool {
 public:
  static constexpr int kMaxThreads = 64;

  CompletionPool() = default;
  ~CompletionPool();
  CompletionPool(const CompletionPool&) = delete;
  CompletionPool& operator=(const CompletionPool&) = delete;

  void submit(std::function<void()> task);
  // Threads started so far (for tests).
  int threads() const;

 private:
  void work();

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> tasks_;  // guarded by mutex_
  std::vector<std::thread> threads_;         // guarded by mutex_
  int idle_ = 0;                             // guarded by mutex_
  bool stopping_ = false;                    // guarded by mutex_
};

}  // namespace bigbatch::torch_backend
