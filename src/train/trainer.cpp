#include "bigbatch/train/trainer.h"

#include "bigbatch/train/config_schema.h"
#include "epoch_loop.h"
#include "run_components.h"
#include "run/run_recorder.h"
#include "run_setup.h"

namespace bigbatch {

// The run's whole shape: set-up builds every part (run_setup.h, MLPerf's
// init_start .. init_stop), the epoch loop trains with them (epoch_loop.h,
// run_start .. run_stop), and the recorder writes what both report. The
// recorder outlives the parts: the stall guard among them writes run_stop
// through it from its own thread.
TrainResult train(const Config& config, const TrainOptions& options, TrainingJob job) {
  validateTrainingConfig(config);
  train_detail::RunRecorder recorder;
  const std::unique_ptr<train_detail::RunComponents> run =
      train_detail::setUpRun(config, options, std::move(job), recorder);
  return train_detail::runEpochs(*run, recorder, options);
}

}  // namespace bigbatch
