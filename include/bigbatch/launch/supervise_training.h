// `bigbatch train --max-restarts N`: what a restart needs, checked once
// before any rank starts — checkpoints on (a restart resumes from one),
// the run able to start (data, model, a resume that fits), every world
// from --min-workers to --workers keeping the global batch, the run and
// checkpoint directories writable — then the supervisor
// (supervise_workers.h) runs the job's attempts.
//
// Threading: the main thread (the supervisor installs signal handlers).
#pragma once

#include <string>

#include "bigbatch/common/config.h"
#include "bigbatch/train/trainer.h"

namespace bigbatch {

struct SupervisedJob {
  std::string launcher = "mpirun";  // run.launcher
  int workers = 1;
  int maxRestarts = 0;
  int minWorkers = 0;
};

// Returns the job's exit status (superviseWorkers'); throws what the checks
// refuse, naming the fix.
int superviseTraining(const Config& config, const TrainOptions& options, const SupervisedJob& job,
                      int argc, char** argv);

}  // namespace bigbatch
