// One MLPerf log for a job that `bigbatch train --max-restarts` restarted.
// Each attempt writes a log of its own, with its own run_start; the MLPerf
// rules time a run from one run_start to one run_stop on the wall clock, as
// the user waited. So when the job ends, the supervisor joins its attempts'
// logs into RUN_DIR/mlperf.log: the first attempt that reached run_start
// up to its end, then for each later attempt what came after its run_start
// (its own header, initialisation and run_start dropped), every failed
// attempt cut where it ended (its `run_stop` with status aborted dropped),
// and after each failure one POINT_IN_TIME line of key `bigbatch_restart`
// (not an MLPerf key: the failure, for a reader of the log). The result has
// one run_start and one run_stop, and the time between them is the job's
// time to train, the lost work and the restarts included. The attempts'
// own logs stay as mlperf.log.<n>.
//
// Threading: none (the supervisor's thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

struct AttemptLog {
  std::vector<std::string> lines;  // the attempt's mlperf.log; empty: it wrote none
  bool failed = false;             // the attempt failed (its run_stop, if any, is dropped)
  // For a failed attempt: the restart line written after it.
  int64_t endedAtMs = 0;
  std::string cause;
  int rank = -1;
  int64_t resumedFromStep = -1;
};

// The joined log's lines, in order (see above).
std::vector<std::string> joinAttemptLogs(const std::vector<AttemptLog>& attempts);

}  // namespace bigbatch
