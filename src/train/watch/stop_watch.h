// The ranks' agreement to stop at a step when a stop was requested from
// outside (SIGUSR1: Slurm's warning before a preemption or the time limit;
// common/stop_request.h). The signal reaches the ranks at different steps,
// so after every optimizer step each rank says whether it has come, and all
// stop when any has: one small max over the job's collectives per step
// (JobCollectives: the same order on every rank), so every rank stops after
// the same step and the checkpoint written there is whole.
//
// Internal to src/train; the training thread, collective.
#pragma once

#include "bigbatch/ddp/job_collectives.h"

namespace bigbatch::train_detail {

class StopWatch {
 public:
  explicit StopWatch(JobCollectives& job) : job_(job) {}
  // Collective: whether any rank has been asked to stop. Once true, stays.
  bool due();
  bool stopped() const { return due_; }

 private:
  JobCollectives& job_;
  bool due_ = false;
};

}  // namespace bigbatch::train_detail
