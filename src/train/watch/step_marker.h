// The newest optimizer step this job has finished, for a supervisor that
// outlives it: under --max-restarts the launcher names a file in
// BIGBATCH_STEP_FILE, rank 0 overwrites it with the global step after
// every step, and after a failure the launcher reads there how far the
// attempt got — the step of the failure, and with the checkpoint it
// resumes from the steps the failure cost (restarts.json).
//
// One pwrite of a fixed-width line per step, no fsync: the page cache
// keeps it across a crash of the process (not of the machine, which the
// supervisor would not survive either).
//
// Internal to src/train. Threading: the training thread.
#pragma once

#include <cstdint>

namespace bigbatch::train_detail {

class StepMarker {
 public:
  // Writes only on the lead rank, and only where BIGBATCH_STEP_FILE is set.
  explicit StepMarker(bool lead);
  ~StepMarker();
  StepMarker(const StepMarker&) = delete;
  StepMarker& operator=(const StepMarker&) = delete;

  void record(int64_t globalStep);

 private:
  int fd_ = -1;
};

}  // namespace bigbatch::train_detail
