// The run after its set-up (MLPerf's run_start .. run_stop): epochs of
// steps from where a resume left off, the evaluations, the epoch records
// and checkpoints, then the run's files — the timeline, model.pt and
// summary.json — and the result.
//
// Internal to src/train. Collective (every rank calls it), on the training
// thread.
#pragma once

#include "bigbatch/train/trainer.h"
#include "run_components.h"
#include "run_recorder.h"

namespace bigbatch::train_detail {

TrainResult runEpochs(RunComponents& run, RunRecorder& recorder, const TrainOptions& options);

}  // namespace bigbatch::train_detail
