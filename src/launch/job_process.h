// How the launcher (`--workers N`) and the supervisor (`--max-restarts`)
// start mpirun: a child in a process group of its own (a signal to the
// group reaches mpirun, which passes it to the ranks it started; they sit
// in process groups of their own), its stderr into a pipe the parent
// reads (failure_reader.h), and SIGTERM from the kernel when the parent
// dies (PR_SET_PDEATHSIG: a SIGKILLed launcher, the OOM killer), so the job
// never outlives the process that started it.
//
// Set-up, in this order: block the termination signals (TerminationSignals-
// Blocked), startJobProcess, record the group for the handlers, unblock —
// a signal in between is then delivered after the group is known.
//
// Internal to src/launch. Threading: from the thread that owns the job.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace bigbatch::launch_detail {

// SIGINT, SIGTERM, SIGHUP and SIGUSR1 (the stop request, common/stop_request.h)
// blocked while it lives.
class TerminationSignalsBlocked {
 public:
  TerminationSignalsBlocked();
  ~TerminationSignalsBlocked();
  TerminationSignalsBlocked(const TerminationSignalsBlocked&) = delete;
  TerminationSignalsBlocked& operator=(const TerminationSignalsBlocked&) = delete;
  const sigset_t& previous() const { return old_; }

 private:
  sigset_t old_;
};

struct JobProcess {
  pid_t pid = -1;   // also its process group
  int stderrFd = -1;  // the read end of its stderr; the caller closes it
};

// Starts `command` (argv; the first word found on PATH) as described above;
// `signalMask` is the mask the child runs with (the caller's before it
// blocked). A command that cannot be executed exits 127 after printing
// "bigbatch: error: cannot start ...: <why>; <fix>" to the pipe. Throws
// IoError when no process can be made.
JobProcess startJobProcess(const std::vector<std::string>& command, const sigset_t& signalMask,
                           const std::string& fix);

}  // namespace bigbatch::launch_detail
