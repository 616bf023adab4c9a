// The training loop: config -> data -> model -> epochs of forward, backward,
// update -> evaluation -> stop at the target accuracy. Writes the run
// directory and the MLPerf log (time to accuracy = run_stop − run_start,
// initialisation included as MLPerf requires).
//
// Runs on the calling thread; libtorch's intra-op pool does the parallel work.
#pragma once

#include <string>

#include "bigbatch/common/config.h"
#include "bigbatch/common/logging.h"

namespace bigbatch {

struct TrainOptions {
  std::string configPath;  // for run.name's default and the logs
  std::string runDir;      // overrides run.dir when non-empty
  bool overwrite = false;  // allow a run directory that already holds a run
  Verbosity verbosity = Verbosity::kNormal;
};

struct TrainResult {
  bool reachedTarget = false;
  double targetAccuracy = 0;
  double finalAccuracy = 0;
  double bestAccuracy = 0;
  double timeToTargetS = -1;  // < 0 when not reached
  double trainTimeS = 0;      // run_start -> run_stop
  double throughputImgS = 0;  // training images per second, evaluation excluded
  int64_t epochs = 0;
  int64_t steps = 0;
  int64_t globalBatchSize = 0;
  int worldSize = 1;
  double firstLoss = 0;  // mean training loss of the first epoch
  double lastLoss = 0;   // mean training loss of the last epoch
  std::string runDir;
};

TrainResult train(const Config& config, const TrainOptions& options);

}  // namespace bigbatch
