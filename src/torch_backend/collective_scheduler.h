// The order in which the backend's communication thread runs collectives:
// the same on every rank, also when collectives are issued from future
// callbacks.
//
// Ranks must run collectives in the same order. A script issues them in
// program order, but a comm hook also issues them from its futures'
// callbacks — PyTorch's powerSGD_hook does, two per bucket, nested inside
// callbacks that wait on them — and those callbacks run on completion
// threads, racing the autograd thread that issues the next bucket's: an
// arrival order could differ between ranks (gloo shares the hazard and
// relies on timing). So each collective belongs to a family: one issued
// outside any callback starts its own; one issued while a family's
// callbacks run joins that family. The thread runs the oldest family to
// the end — its own collectives, and every one its callbacks issue, in the
// order they are issued — before the next family's first: a family ends
// when it has nothing queued and none of its callbacks is still running.
// Issue order within a family is program order on one thread, so the
// whole order is the same on every rank.
//
// A callback that waits on something outside its family (a collective a
// later family would issue) would hold this order forever: once a later
// family's first collective has waited `kStuckWait` behind a family whose
// callbacks are all still running — the wait counted from when the thread
// last went idle, so that a collective held up by a slow peer does not
// count — the thread goes on (warned once). Every
// rank meets such a wait at the same point of the program and goes on
// alike. What this cannot tell from a wait is a callback that is merely
// slow for that long on one rank: that rank would go on alone, which the
// call check names where the calls differ (tensor_collectives.h) — and
// does not where they are alike (two buckets of one size). No callback of
// PyTorch's or bigbatch's hooks takes a fraction of that.
//
// (The families' numbers are not the same on every rank — a callback
// added to a future that is already complete runs at once, on the thread
// that adds it, outside the family — so they are not compared; the order
// they give is the same.)
//
// Tasks that are not collectives (the codecs' state, read or loaded on one
// rank only: a script saves it on rank 0) take no family number.
//
// Threading: submit() from any thread (once the loop has ended, after
// stop(), it throws InvalidArgument: no thread would run the task); run()
// is the communication thread's loop; callbacksStarted/Ended from
// completion threads.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace bigbatch::torch_backend {

class CollectiveScheduler {
 public:
  static constexpr std::chrono::seconds kStuckWait{30};
  using Task = std::function<void(int64_t family)>;

  // Starts the communication thread. `idlePoll` (may be empty) is called
  // on it after each task and whenever it would idle (point_to_point.h:
  // the sends and receives in flight); while it returns true, the thread
  // idles only briefly (from 20 µs, doubling to 1 ms) and calls it again.
  explicit CollectiveScheduler(std::function<bool()> idlePoll = {});
  // Runs what is queued (and what its callbacks queue), then stops the
  // thread; idempotent. The destructor calls it.
  void stop();
  ~CollectiveScheduler();
  CollectiveScheduler(const CollectiveScheduler&) = delete;
  CollectiveScheduler& operator=(const CollectiveScheduler&) = delete;

  // Queues `task` in the calling thread's family (outside callbacks, a new
  // one: the next number; for a task that is not a collective, none —
  // `family` is then -1); it runs on the communication thread with its
  // family.
  void submit(Task task, bool collective = true);
  // A completion of family `family` — a future whose callbacks will run —
  // is handed to a completion thread (called on the communication thread,
  // before the hand-off: the family is not over until it has run); the
  // completion thread then joins the family while the callbacks run.
  void completionQueued(int64_t family);
  void callbacksStarted(int64_t family);
  void callbacksEnded(int64_t family);

 private:
  static constexpr int64_t kNoFamily = -1;
  struct Queued {
    int64_t family;
    Task task;
    std::chrono::steady_clock::time_point queuedAt;
  };
  void loop();
  // The next task to run, under the lock; false once stopping and empty.
  bool next(std::unique_lock<std::mutex>& lock, Queued& out);

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Queued> queue_;              // guarded by mutex_, in submission order
  std::map<int64_t, int> callbacks_;      // guarded by mutex_: family -> completions not over
  int64_t nextFamily_ = 0;                // guarded by mutex_
  int64_t active_ = -1;                   // guarded by mutex_: the family being run
  bool stopping_ = false;                 // guarded by mutex_
  bool stopped_ = false;                  // guarded by mutex_: the loop has ended
  bool warned_ = false;                   // guarded by mutex_
  uint64_t changes_ = 0;                  // guarded by mutex_: counts notifies of changed_
  const std::function<bool()> idlePoll_;  // set before the thread starts
  // When the thread last finished a task (guarded by mutex_).
  std::chrono::steady_clock::time_point idleSince_ = std::chrono::steady_clock::now();
  std::thread thread_;
};

}  // namespace bigbatch::torch_backend
