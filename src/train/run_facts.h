// What summary.json says of a finished run beyond its result (RunFacts,
// run/run_report.h): the recipe's choices as they took effect, the
// exchange's bytes and tuning, the checkpoints' count and wait — read off
// the run's parts once, after its last step.
//
// Internal to src/train; rank 0's view, on the training thread.
#pragma once

#include "run/run_recorder.h"
#include "run/run_report.h"
#include "run_components.h"

namespace bigbatch::train_detail {

RunFacts collectRunFacts(RunComponents& run, const RunRecorder& recorder);

}  // namespace bigbatch::train_detail
