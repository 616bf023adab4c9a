#include "completion_pool.h"

namespace bigbatch::torch_backend {
namespace {

// Threads detached by a pool's destructor and not yet returned.
std::mutex detachedMutex;
std::condition_variable detachedDone;
int detachedRunning = 0;  // guarded by detachedMutex

}  // namespace

CompletionPool::CompletionPool() : state_(std::make_shared<State>()) {}

CompletionPool::~CompletionPool() {
  State& s = *state_;
  std::vector<std::thread> threads;
  {
    const std::lock_guard<std::mutex> lock(s.mutex);
    s.stopping = true;
    threads.swap(s.threads);
    s.detached = std::this_thread::get_id();  // matters only if it is one of them
  }
  s.wake.notify_all();
  const std::thread::id self = std::this_thread::get_id();
  bool onPoolThread = false;
  for (std::thread& t : threads) {
    if (t.get_id() == self) {
      onPoolThread = true;
      {
        const std::lock_guard<std::mutex> lock(detachedMutex);
        ++detachedRunning;  // until work() returns on it
      }
      t.detach();  // returns from its task to work(), which sees `stopping`
    } else {
      t.join();
    }
  }
  if (!onPoolThread) return;
  // The other threads have drained the queue before ending; with none, what
  // is left runs here.
  std::unique_lock<std::mutex> lock(s.mutex);
  while (runNext(s, lock)) {
  }
}

void CompletionPool::submit(std::function<void()> task) {
  State& s = *state_;
  const std::lock_guard<std::mutex> lock(s.mutex);
  s.tasks.push_back(std::move(task));
  if (s.idle >= static_cast<int>(s.tasks.size()) ||
      static_cast<int>(s.threads.size()) >= kMaxThreads) {
    s.wake.notify_one();
    return;
  }
  s.threads.emplace_back([state = state_] { work(state); });
}

int CompletionPool::threads() const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  return static_cast<int>(state_->threads.size());
}

void CompletionPool::work(const std::shared_ptr<State>& state) {
  State& s = *state;
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    ++s.idle;
    s.wake.wait(lock, [&s] { return s.stopping || !s.tasks.empty(); });
    --s.idle;
    if (!runNext(s, lock)) break;  // stopping, nothing left
  }
  if (s.stopping && s.detached == std::this_thread::get_id()) {
    lock.unlock();
    const std::lock_guard<std::mutex> done(detachedMutex);
    --detachedRunning;
    detachedDone.notify_all();
  }
}

bool CompletionPool::waitForDetached(std::chrono::milliseconds limit) {
  std::unique_lock<std::mutex> lock(detachedMutex);
  return detachedDone.wait_for(lock, limit, [] { return detachedRunning == 0; });
}

bool CompletionPool::runNext(State& s, std::unique_lock<std::mutex>& lock) {
  if (s.tasks.empty()) return false;
  std::function<void()> task = std::move(s.tasks.front());
  s.tasks.pop_front();
  lock.unlock();
  task();
  // Destroyed before the lock is taken again: what the task holds (the last
  // reference to the process group) may destroy the pool, which takes the
  // lock.
  task = nullptr;
  lock.lock();
  return true;
}

}  // namespace bigbatch::torch_backend
