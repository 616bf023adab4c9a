#include "watch/supervisor_watch.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "bigbatch/common/process_start.h"
#include "bigbatch/common/supervision_env.h"

namespace bigbatch::train_detail {

std::unique_ptr<SupervisorWatch> SupervisorWatch::fromEnvironment() {
  const char* value = std::getenv(kSupervisorEnv);
  if (value == nullptr) return nullptr;
  const std::string text = value;
  const size_t a = text.rfind(':');
  const size_t b = a == std::string::npos || a == 0 ? std::string::npos : text.rfind(':', a - 1);
  if (b == std::string::npos) return nullptr;
  const std::string host = text.substr(0, b), start = text.substr(a + 1);
  const long pid = std::atol(text.substr(b + 1, a - b - 1).c_str());
  char here[256] = {};
  gethostname(here, sizeof here - 1);
  if (pid <= 0 || host != here) return nullptr;
  // The system call itself: glibc's wrapper (2.36) is not declared for C++.
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  const int openError = errno;
  // Opened before the check: if the start time still matches now, the
  // pidfd refers to that process and not to one that reused its pid.
  if (pidfd < 0 || processStartTime(pid) != start) {
    if (pidfd >= 0) ::close(pidfd);
    // Gone already (or no pidfd: a kernel before 5.3 — mpirun's
    // PR_SET_PDEATHSIG still ends the job).
    if (pidfd >= 0 || openError == ESRCH) {
      std::fprintf(stderr, "bigbatch: error: the supervisor (pid %ld) is gone; ending this rank\n",
                   pid);
      std::fflush(stderr);
      _exit(1);
    }
    return nullptr;
  }
  const int stopFd = eventfd(0, EFD_CLOEXEC);
  if (stopFd < 0) {
    ::close(pidfd);
    return nullptr;
  }
  return std::unique_ptr<SupervisorWatch>(
      new SupervisorWatch(pidfd, stopFd, "pid " + std::to_string(pid)));
}

SupervisorWatch::SupervisorWatch(int pidfd, int stopFd, std::string who)
    : pidfd_(pidfd), stopFd_(stopFd), who_(std::move(who)), thread_([this] { watch(); }) {}

SupervisorWatch::~SupervisorWatch() {
  const uint64_t one = 1;
  (void)!::write(stopFd_, &one, sizeof one);
  thread_.join();
  ::close(pidfd_);
  ::close(stopFd_);
}

void SupervisorWatch::watch() {
  pollfd fds[2] = {{pidfd_, POLLIN, 0}, {stopFd_, POLLIN, 0}};
  for (;;) {
    const int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN)) return;
    if (fds[0].revents & POLLIN) break;
  }
  // No clean-up: the job is over, and the survivors' peers are ending too;
  // exiting now frees the port, the shared memory and the GPU.
  std::fprintf(stderr,
               "bigbatch: error: the supervisor (%s) is gone; ending this rank so that no worker "
               "outlives it\n",
               who_.c_str());
  std::fflush(stderr);
  _exit(1);
}

}  // namespace bigbatch::train_detail
