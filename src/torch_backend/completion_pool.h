// Where the backend completes its futures: never on the thread that runs
// the collectives. A future's callbacks run on the thread that marks it
// complete, and DDP's PowerSGD hook blocks inside one on a collective of
// its own (a nested get_future().wait()): completed on the communication
// thread, that collective could never run. Each completion goes to an idle
// thread of this pool, or to a new one when all are busy (a cached pool:
// one callback blocked in a nested wait does not hold up the next
// completion), up to kMaxThreads, beyond which completions queue.
//
// The pool may be destroyed on one of its own threads: a script that drops
// its last reference to the process group inside a future's callback ends
// the group there. That thread is not joined (a thread cannot join itself)
// but detached; it runs what is still queued first, and its state lives on
// (shared with the pool) until it has returned from its task. Such a thread
// may still be finishing its task (dropping the Python objects it holds)
// when the script ends: waitForDetached() lets the interpreter's exit wait
// for it, as a thread that took the GIL during finalization would be ended
// by force (and std::terminate called on the way).
//
// Threading: submit() from any thread; the destructor runs what is queued
// and joins every thread but the calling one (the caller must not hold a
// lock a callback needs, e.g. Python's GIL: see ProcessGroupBigbatch's
// destructor).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace bigbatch::torch_backend {

class CompletionPool {
 public:
  static constexpr int kMaxThreads = 64;

  CompletionPool();
  ~CompletionPool();
  CompletionPool(const CompletionPool&) = delete;
  CompletionPool& operator=(const CompletionPool&) = delete;

  void submit(std::function<void()> task);
  // Threads started so far (for tests).
  int threads() const;
  // Waits, up to `limit`, until every thread detached by a pool's
  // destructor has returned; false if one still runs. Called by the
  // process's exit (with Python's GIL released).
  static bool waitForDetached(std::chrono::milliseconds limit);

 private:
  // What the threads use: shared with them, so that a thread the
  // destructor detached can finish after the pool is gone.
  struct State {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::function<void()>> tasks;  // guarded by mutex
    std::vector<std::thread> threads;         // guarded by mutex
    int idle = 0;                             // guarded by mutex
    bool stopping = false;                    // guarded by mutex
    std::thread::id detached;                 // guarded by mutex: the one not joined
  };
  static void work(const std::shared_ptr<State>& state);
  // Runs the oldest queued task with the lock released; false if none.
  static bool runNext(State& s, std::unique_lock<std::mutex>& lock);

  std::shared_ptr<State> state_;
};

}  // namespace bigbatch::torch_backend
