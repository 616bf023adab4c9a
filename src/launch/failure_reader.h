// What a job's messages say about its failure, read from mpirun's stderr
// while it is passed on to ours: the first bigbatch error line (bigbatch's
// errors name their rank, "[rank 1] ..."), and the rank and host mpirun
// or srun names when a process died ("process rank 1 with PID 0 on node h1
// exited on signal 9"; "srun: error: h1: task 1: Killed"). The launcher
// and the supervisor print it again after the job, so the named cause is
// the last thing a user reads, not mpirun's help text.
//
// Internal to src/launch. Threading: a thread of its own pumps the pipe;
// finish() from the owner once every writer is gone.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace bigbatch::launch_detail {

class FailureReader {
 public:
  // Reads `fd` (the read end of mpirun's stderr) until EOF; takes it over.
  explicit FailureReader(int fd);
  ~FailureReader();
  FailureReader(const FailureReader&) = delete;
  FailureReader& operator=(const FailureReader&) = delete;

  // Waits for EOF (every writer gone), then closes the pipe. With a limit,
  // stops reading after it: a process that outlived mpirun and still holds
  // the pipe must not keep the launcher waiting.
  void finish();
  void finish(std::chrono::milliseconds limit);
  int rank() const { return rank_; }  // -1: none named
  const std::string& host() const { return host_; }
  const std::string& reason() const { return reason_; }  // "": no bigbatch error line

 private:
  void pump();
  void scan(const std::string& line);

  int fd_;
  std::atomic<bool> stop_{false}, done_{false};
  int rank_ = -1;
  bool byTermination_ = false;  // rank_ from srun's "Terminated": a later line may say better
  std::string host_, reason_;
  std::thread thread_;
};

}  // namespace bigbatch::launch_detail
