#include "collective_scheduler.h"

#include <algorithm>

#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"

namespace bigbatch::torch_backend {
namespace {

// The family of the completion whose callbacks this thread runs; -1: none.
thread_local int64_t currentFamily = -1;

constexpr int64_t kFirstPollWaitUs = 20, kMaxPollWaitUs = 1000;

}  // namespace

CollectiveScheduler::CollectiveScheduler(std::function<bool()> idlePoll)
    : idlePoll_(std::move(idlePoll)), thread_([this] { loop(); }) {}

void CollectiveScheduler::stop() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    ++changes_;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CollectiveScheduler::~CollectiveScheduler() { stop(); }

void CollectiveScheduler::submit(Task task, bool collective) {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    BIGBATCH_REQUIRE(!stopped_, InvalidArgument,
                     "a collective on a bigbatch process group that was shut down (the "
                     "interpreter is exiting, or the group was destroyed)");
    const int64_t family = currentFamily >= 0 ? currentFamily
                           : collective       ? nextFamily_++
                                              : kNoFamily;
    queue_.push_back({family, std::move(task), std::chrono::steady_clock::now()});
    ++changes_;
  }
  changed_.notify_all();
}

void CollectiveScheduler::completionQueued(int64_t family) {
  const std::lock_guard<std::mutex> lock(mutex_);
  ++callbacks_[family];
}

void CollectiveScheduler::callbacksStarted(int64_t family) { currentFamily = family; }

void CollectiveScheduler::callbacksEnded(int64_t family) {
  currentFamily = -1;
  // Notified under the lock: the destructor may be waiting for this, and
  // must not free the scheduler before this call is done with it.
  const std::lock_guard<std::mutex> lock(mutex_);
  if (--callbacks_[family] == 0) callbacks_.erase(family);
  ++changes_;
  changed_.notify_all();
}

bool CollectiveScheduler::next(std::unique_lock<std::mutex>& lock, Queued& out) {
  int64_t pollWaitUs = kFirstPollWaitUs;
  for (;;) {
    // The active family's next task, in issue order.
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (it->family == active_ && active_ != kNoFamily) {
        out = std::move(*it);
        queue_.erase(it);
        return true;
      }
    }
    const bool activeRunning = active_ >= 0 && callbacks_.count(active_) > 0;
    // The oldest task queued (not of the active family: it would have been
    // taken) has waited behind the active family's callbacks — counted from
    // when it came or when this thread last went idle, whichever is later:
    // time the thread spent running a collective (a slow peer) is no one's
    // callback waiting, and counting it would let one rank go on alone.
    const auto waitingSince = std::max(queue_.empty() ? idleSince_ : queue_.front().queuedAt,
                                       idleSince_);
    const bool stuck = activeRunning && !queue_.empty() &&
                       std::chrono::steady_clock::now() - waitingSince >= kStuckWait;
    if (!activeRunning || stuck) {
      if (stuck && !warned_) {
        warned_ = true;
        log().warn("a collective's callback has waited {} s on something outside its own "
                   "collectives; running the next ones (if the ranks' orders now differ, the "
                   "call check names it)",
                   kStuckWait.count());
      }
      if (!queue_.empty()) {  // the oldest family's first task
        out = std::move(queue_.front());
        queue_.pop_front();
        active_ = out.family;
        return true;
      }
    }
    // Stopping: once nothing is queued and no callback may still queue more.
    if (stopping_ && queue_.empty() && callbacks_.empty()) {
      stopped_ = true;  // under the same lock: a later submit raises, none is dropped
      return false;
    }
    if (idlePoll_) {
      const uint64_t seen = changes_;
      lock.unlock();
      const bool inFlight = idlePoll_();
      lock.lock();
      if (changes_ != seen) {  // a notify while unlocked: look again
        pollWaitUs = kFirstPollWaitUs;
        continue;
      }
      if (inFlight) {
        changed_.wait_for(lock, std::chrono::microseconds(pollWaitUs));
        pollWaitUs = std::min(kMaxPollWaitUs, 2 * pollWaitUs);
        continue;
      }
      pollWaitUs = kFirstPollWaitUs;
    }
    if (activeRunning || (stopping_ && !callbacks_.empty())) {
      changed_.wait_for(lock, std::chrono::milliseconds(100));
    } else {
      changed_.wait(lock);
    }
  }
}

void CollectiveScheduler::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  Queued q;
  while (next(lock, q)) {
    lock.unlock();
    q.task(q.family);
    q.task = nullptr;
    if (idlePoll_) idlePoll_();
    lock.lock();
    idleSince_ = std::chrono::steady_clock::now();
  }
}

}  // namespace bigbatch::torch_backend
