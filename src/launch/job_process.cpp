#include "job_process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "bigbatch/common/error.h"

namespace bigbatch::launch_detail {

TerminationSignalsBlocked::TerminationSignalsBlocked() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaddset(&set, sig);
  sigprocmask(SIG_BLOCK, &set, &old_);
}

TerminationSignalsBlocked::~TerminationSignalsBlocked() {
  sigprocmask(SIG_SETMASK, &old_, nullptr);
}

JobProcess startJobProcess(const std::vector<std::string>& command, const sigset_t& signalMask,
                           const std::string& fix) {
  BIGBATCH_REQUIRE(!command.empty(), InvalidArgument, "no command to start");
  // Made before the fork: the child only calls what is safe after it.
  std::vector<char*> args;
  for (const auto& a : command) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const std::string cannotStart = "bigbatch: error: cannot start '" + command.front() + "': ";
  const std::string fixLine = "; " + fix + "\n";
  // A SIGCHLD ignored by whoever started us would make the job's status
  // unreadable (waitpid: ECHILD) and is inherited by mpirun: take it back.
  struct sigaction chld {};
  if (sigaction(SIGCHLD, nullptr, &chld) == 0 && chld.sa_handler == SIG_IGN) {
    chld.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &chld, nullptr);
  }
  int errPipe[2];
  BIGBATCH_REQUIRE(pipe(errPipe) == 0, IoError, "cannot make a pipe: {}", std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) {
    const int err = errno;
    ::close(errPipe[0]);
    ::close(errPipe[1]);
    BIGBATCH_THROW(IoError, "cannot fork the job's launcher: {}", std::strerror(err));
  }
  if (child == 0) {
    // Only async-signal-safe calls from here to exec. The parent's handlers
    // (which forward to the job) are not the child's: a signal pending at
    // the unmask, or the death signal, must end the child, not be swallowed.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaction(sig, &dfl, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(128 + SIGTERM);  // gone before prctl took hold
    sigprocmask(SIG_SETMASK, &signalMask, nullptr);
    setpgid(0, 0);
    dup2(errPipe[1], STDERR_FILENO);
    ::close(errPipe[0]);
    ::close(errPipe[1]);
    execvp(args[0], args.data());
    const char* why = strerrordesc_np(errno);  // a static string: no locale, no allocation
    if (why == nullptr) why = "unknown error";
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, cannotStart.data(), cannotStart.size());
    n = ::write(STDERR_FILENO, why, std::strlen(why));
    n = ::write(STDERR_FILENO, fixLine.data(), fixLine.size());
    _exit(127);
  }
  setpgid(child, child);  // also here: no race with a signal before the child's own call
  ::close(errPipe[1]);
  return {child, errPipe[0]};
}

}  // namespace bigbatch::launch_detail
