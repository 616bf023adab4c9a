// CommThread: the one thread that talks to the Communicator during training.
//
// Tasks run one at a time, in submission order, on a dedicated thread, so
// MPI (initialised MPI_THREAD_SERIALIZED) is only ever entered from one
// thread after start-up and the collectives of every rank happen in the same
// order. The compute thread submits work and later waits for it; the time
// it spends waiting is the exposed communication.
//
// Threading: submit()/wait*()/runAfterFailure() from one owner thread; tasks
// run on the communication thread. An exception thrown by a task is kept and
// rethrown by the next wait (later tasks are skipped: the exchange is
// broken), except runAfterFailure()'s, which runs whatever happened before.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace bigbatch {

class CommThread {
 public:
  CommThread();
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `task`; returns its ticket (1, 2, ...).
  uint64_t submit(std::function<void()> task);
  // Blocks until task `ticket` and all before it are done; rethrows a task's error.
  void waitFor(uint64_t ticket);
  void waitAll();
  // Runs `task` on the communication thread and waits for it.
  void run(std::function<void()> task);
  // Runs `task` on the communication thread after every task queued before
  // it has finished or failed — even when one failed — and waits for it;
  // never rethrows (neither an earlier task's error nor its own). For the
  // error notice of a failing run: MPI stays entered by one thread at a time.
  void runAfterFailure(std::function<void()> task);

 private:
  struct Task {
    std::function<void()> fn;
    bool evenAfterFailure = false;
  };
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  uint64_t submitted_ = 0, completed_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace bigbatch
