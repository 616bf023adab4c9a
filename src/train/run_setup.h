// The set-up of a training run on one rank (MLPerf's init_start ..
// init_stop): setUpRun() builds every part of the run, in this order —
//   1. the ranks: who trains, on which device, from which checkpoint;
//   2. the recipe, resolved once from the config;
//   3. the threads each rank computes with;
//   4. the data;
//   5. the model, the same on every rank from the same seed;
//   6. the gradient exchange, and the stall guard that watches it;
//   7. the restore of a resume (or the check that the ranks agree);
//   8. the optimizer, its schedules and the loss scaler;
//   9. the training input, the checkpointer and the step;
// then records the recipe and prints the banner. Each step is a function
// of what the steps before it built (run_setup.cpp reads as that list).
//
// Internal to src/train. Called once per run, on the training thread;
// collective (every rank calls it).
#pragma once

#include <memory>

#include "bigbatch/common/config.h"
#include "bigbatch/train/trainer.h"
#include "run_components.h"
#include "run/run_recorder.h"

namespace bigbatch::train_detail {

// `recorder` must outlive the result: the stall guard writes run_stop
// through it from its own thread.
std::unique_ptr<RunComponents> setUpRun(const Config& config, const TrainOptions& options,
                                        TrainingJob job, RunRecorder& recorder);

}  // namespace bigbatch::train_detail
