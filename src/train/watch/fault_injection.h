// Fault injection (fault.*): the failures docs/RELIABILITY.md and the fault
// campaign (bench/fault_campaign.sh) measure. At optimizer step fault.step,
// rank fault.rank throws, aborts, SIGKILLs itself or hangs ("nan" and
// "nan_input" return, and the step makes this rank's loss, or its batch,
// NaN) — where fault.during says:
//   step        as the step begins;
//   exchange    after the step's last backward, with its gradient buckets
//               in flight on the communication thread;
//   evaluation  in the first evaluation after the step, between this
//               rank's shard and the allreduce of the counts;
//   checkpoint  in the first checkpoint after the step, right after rank 0
//               handed it to its background writer (the write in flight).
// "pause" is not a failure but a state for a test to act on: the rank
// writes fault.pause_dir/paused-rank-<rank> and waits, alive and in no
// collective, until the file is removed (with fault.rank = -1 every rank
// stops at the same step, so no peer waits for it: a test can then kill or
// stop one and release the others, on a machine of any speed).
// Which rank: fault.rank (-1: every rank); or, when fault.host or fault.slot is set, every
// rank on that host (its hostname) and/or in that slot of its host
// (common/launch_slot.h) — a lost host or a bad device, which keeps failing
// whatever rank the next attempt gives it.
// fault.attempts N > 0 arms it only in a supervised job's first N attempts
// (BIGBATCH_RESTART_COUNT, set by --max-restarts, below N): a transient
// fault that a restart recovers from. Prints "bigbatch: injecting fault
// ..." to stderr first.
//
// Internal to src/train. Threading: the training thread.
#pragma once

#include <cstdint>
#include <string>

namespace bigbatch::train_detail {

// The fault.* keys, typed.
struct FaultPlan {
  std::string kind = "none";
  int rank = 0;
  std::string host;  // "": any host
  int slot = -1;     // -1: any slot
  int64_t step = 1;
  std::string during = "step";
  int64_t attempts = 0;  // 0: every attempt
  std::string pauseDir;  // kind "pause": where the marker files go
};

class FaultInjector {
 public:
  // Where this process runs: its world rank, its slot on its host, the
  // host's name.
  struct Placement {
    int rank = 0;
    int slot = 0;
    std::string host;
  };
  // Throws InvalidArgument for a NaN fault anywhere but at a step.
  FaultInjector(FaultPlan plan, Placement here);

  // Whether the planned fault is due at `site` (a fault.during value) at
  // optimizer step `step` — exactly that step for "step" and "exchange",
  // the first call at or after it for "evaluation" and "checkpoint". True
  // at most once per process.
  bool due(const char* site, int64_t step);
  // The fault itself, now; returns only for the NaN kinds (the caller
  // poisons its loss or batch).
  void inject(const char* site, int64_t step);
  // inject() when due().
  void injectIfDue(const char* site, int64_t step) {
    if (due(site, step)) inject(site, step);
  }
  const std::string& kind() const { return plan_.kind; }

 private:
  void pauseUntilReleased(int64_t step) const;

  const FaultPlan plan_;
  const Placement here_;
  bool armed_;
};

}  // namespace bigbatch::train_detail
