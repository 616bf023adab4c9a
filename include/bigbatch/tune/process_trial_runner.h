// The TrialRunner of `bigbatch tune`: each job is a `bigbatch train`
// subprocess — an ordinary run in <tune dir>/<job name>/, its terminal
// output appended to <tune dir>/logs/<job name>.log — and its outcome is the
// run's summary.json.
//
// A job whose run directory holds a checkpoint continues it (`--resume
// auto`: the next rung of a trial, or a job a killed tune left running); a
// run directory without one is a run that never got far, and starts afresh.
// Each job runs in its own process group with the parent-death signal set,
// so a killed tune takes its jobs (and their mpirun and ranks) with it;
// SIGINT and SIGTERM to the tune are passed on to every job. With several
// slots the CPUs this process may use are split evenly between them, so
// jobs at once do not pin their ranks to the same cores.
//
// Threading: one owner thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "bigbatch/tune/tuner.h"

namespace bigbatch {

struct ProcessTrialRunnerOptions {
  std::string program;            // the bigbatch binary
  std::string config;             // the recipe every trial starts from
  std::string dir;                // the tune directory
  std::vector<std::string> sets;  // key=value for every job (before the trial's own)
  int slots = 1;
};

class ProcessTrialRunner : public TrialRunner {
 public:
  explicit ProcessTrialRunner(ProcessTrialRunnerOptions options);
  ~ProcessTrialRunner() override;  // ends jobs still running (SIGTERM, then waits)

  void start(int slot, const TrialJob& job) override;
  std::pair<int, TrialOutcome> wait() override;

  // The command line start() runs for `job` (for logs and tests).
  std::vector<std::string> commandLine(const TrialJob& job, bool resume) const;

 private:
  struct Running {
    int slot;
    TrialJob job;
    std::chrono::steady_clock::time_point start;
  };
  TrialOutcome outcomeOf(const Running& r, int status) const;

  ProcessTrialRunnerOptions options_;
  std::vector<std::vector<int>> slotCpus_;  // empty: inherit
  std::map<pid_t, Running> running_;
};

}  // namespace bigbatch
