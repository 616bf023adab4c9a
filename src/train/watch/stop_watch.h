// The ranks' agreement to stop at a step when a stop was requested from
// outside (SIGUSR1: Slurm's warning before a preemption or the time limit;
// common/stop_request.h). The signal reaches the ranks at different steps,
// so after every optimizer step each rank says whether it has come, and all
// stop when any has: one small max over the job's collectives per step (the
// same order on every rank), so every rank stops after the same step and
// the checkpoint written there is whole.
//
// The vote is not waited for: the one started after step s is read after
// step s+1, having run on the communication thread while that step
// computed — a stop asked during step s takes effect after step s+1, and no
// step waits for a round trip.
//
// Internal to src/train; the training thread, collective.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "bigbatch/ddp/job_collectives.h"

namespace bigbatch::train_detail {

class StopWatch {
 public:
  // `requested`: whether this rank has been asked (stopRequested; a test's
  // own).
  explicit StopWatch(JobCollectives& job, std::function<bool()> requested = {});
  // Collective, once after every step: whether every rank stops now.
  // Once true, stays.
  bool due();
  bool stopped() const { return due_; }

 private:
  JobCollectives& job_;
  std::function<bool()> requested_;
  bool due_ = false;
  std::shared_ptr<int64_t> vote_;  // the vote in flight, its result once finished
  uint64_t ticket_ = 0;            // 0: none in flight
};

}  // namespace bigbatch::train_detail
