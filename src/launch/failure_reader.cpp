#include "failure_reader.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <regex>

#include "bigbatch/launch/supervise_workers.h"

namespace bigbatch::launch_detail {

FailureReader::FailureReader(int fd) : fd_(fd), thread_([this] { pump(); }) {}

FailureReader::~FailureReader() { finish(); }

void FailureReader::finish() {
  if (!thread_.joinable()) return;
  thread_.join();
  ::close(fd_);
}

void FailureReader::finish(std::chrono::milliseconds limit) {
  if (!thread_.joinable()) return;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  // pump() polls in short slices, so it sees the flag within 100 ms.
  while (std::chrono::steady_clock::now() < deadline && !done_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop_ = true;
  finish();
}

void FailureReader::pump() {
  std::string pending;
  char buf[4096];
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);
    if (ready < 0 && errno != EINTR) break;
    if (stop_.load()) break;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    (void)!::write(STDERR_FILENO, buf, static_cast<size_t>(n));
    pending.append(buf, static_cast<size_t>(n));
    for (size_t end; (end = pending.find('\n')) != std::string::npos;) {
      scan(pending.substr(0, end));
      pending.erase(0, end + 1);
    }
  }
  if (!pending.empty()) scan(pending);
  done_ = true;
}

void FailureReader::scan(const std::string& line) {
  // mpirun: "... process rank 1 with PID 77 on node h1 exited on signal 9";
  // srun: "srun: error: h1: task 1: Killed" (or "tasks 2-3: ...": the first).
  static const std::regex mpiRank(R"(process rank (\d+) .*on node (\S+))");
  static const std::regex srunTask(R"(^srun: error: (\S+): tasks? (\d+)[-,\d]*: )");
  std::smatch m;
  if (rank_ < 0 && std::regex_search(line, m, mpiRank)) {
    rank_ = std::stoi(m[1]);
    host_ = m[2];
  } else if (std::regex_search(line, m, srunTask) && (rank_ < 0 || byTermination_)) {
    // srun ends the other tasks itself (--kill-on-bad-exit), and its line
    // for them ("Terminated") may come first: the first other line names
    // the task that failed.
    const bool terminated = line.find(": Terminated") != std::string::npos;
    if (rank_ < 0 || !terminated) {
      rank_ = std::stoi(m[2]);
      host_ = m[1];
      byTermination_ = terminated;
    }
  }
  if (reason_.empty() && line.rfind("bigbatch: ", 0) == 0 &&
      line.find("error") != std::string::npos) {
    reason_ = line;
    if (rank_ < 0) rank_ = failedRankIn(line);
  }
}

}  // namespace bigbatch::launch_detail
