// CommThread: the one thread that talks to the Communicator during training.
//
// Tasks run one at a time, in submission order, on a dedicated thread, so
// MPI (initialised MPI_THREAD_SERIALIZED) is only ever entered from one
// thread after start-up and the collectives of every rank happen in the same
// order. The compute thread submits work and later waits for it; the time
// it spends waiting is the exposed communication.
//
// Threading: submit()/wait*() from one owner thread; tasks run on the
// communication thread. An exception thrown by a task is kept and rethrown
// by the next wait (later tasks are skipped: the exchange is broken).
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

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t submitted_ = 0, completed_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace bigbatch
