// The run after its set-up (MLPerf's run_start .. run_stop): epochs of
// steps from where a resume left off, the evaluations, the epoch records
// and checkpoints, then the run's files — the timeline, model.pt and
// summary.json — and the result. A stop asked from outside (SIGUSR1,
// watch/stop_watch.h) ends it at a step, checkpointed.
//
// EpochLoop's steps are in epoch_loop.cpp, an epoch's close (evaluation,
// records, the checkpoint at its end) and the run's end in epoch_close.cpp.
//
// Internal to src/train. Collective (every rank calls it), on the training
// thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/train/step_profiler.h"
#include "bigbatch/train/trainer.h"
#include "run/run_recorder.h"
#include "run/run_report.h"
#include "run_components.h"
#include "step/device_feed.h"
#include "watch/step_marker.h"
#include "watch/stop_watch.h"

namespace bigbatch::train_detail {

TrainResult runEpochs(RunComponents& run, RunRecorder& recorder, const TrainOptions& options);

using Clock = std::chrono::steady_clock;

inline double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// What one epoch's steps leave behind on this rank.
struct EpochSteps {
  int64_t globalBatch = 0;  // under the batch-size schedule
  StepTimes times;          // this rank's step-time breakdown
  double trainS = 0;        // wall time of the steps
  double lr = 0;            // of the last step
  double momentum = 0;
};

// The loop over the epochs, on the parts set-up built. Its own state is
// the run's clock and whether train.stop_after_epoch paused it; the run's
// position and totals are run.state, which every checkpoint snapshots.
class EpochLoop {
 public:
  EpochLoop(RunComponents& run, RunRecorder& recorder, const TrainOptions& options)
      : run_(run),
        recorder_(recorder),
        options_(options),
        recipe_(run.recipe),
        state_(run.state),
        rank_(run.start.rank),
        worldSize_(run.start.worldSize),
        stepMarker_(run.lead),
        stopWatch_(*run.exchange.job) {
    if (!options.profilePath.empty() && run.lead) {
      profiler_ = std::make_unique<StepProfiler>(options.profilePath, options.profileFirstStep,
                                                 options.profileLastStep);
    }
  }

  TrainResult run();

 private:
  EpochSteps trainEpoch();
  void trainOneStep(DeviceFeed& feed, int64_t stepsInEpoch, EpochSteps& e);
  void checkpointMidEpoch(int64_t stepsInEpoch);
  void checkpointNow();
  void settleSteps();
  // Top-1 and top-5 test accuracy on evaluation epochs.
  std::optional<std::pair<double, double>> evaluateIfDue(double& evalS);
  void agreeOnBatchNormStatistics(std::vector<torch::Tensor>& own);
  EpochRecord closeEpoch(const EpochSteps& e);
  bool stopOrCheckpoint(const EpochRecord& record);
  TrainResult finish();
  // A stop asked from outside (StopWatch): the checkpoint written, no
  // model.pt or summary (the run is not done).
  TrainResult finishStopped();
  // A failing run tells the other ranks and closes its MLPerf log.
  void abortRun(const std::string& message);
  double elapsedNow() const { return run_.elapsedBefore + secondsSince(runStart_); }
  void continueJobClock();
  JobCollectives& job() { return *run_.exchange.job; }
  DistributedDataParallel& ddp() { return *run_.exchange.ddp; }
  DynamicLossScaler* scaler() { return run_.optimization.scaler.get(); }

  RunComponents& run_;
  RunRecorder& recorder_;
  const TrainOptions& options_;
  const RunRecipe& recipe_;
  RunState& state_;
  const int rank_, worldSize_;
  Clock::time_point runStart_;
  StepMarker stepMarker_;  // for the supervisor (--max-restarts)
  StopWatch stopWatch_;    // SIGUSR1: checkpoint and stop at the agreed step
  bool paused_ = false;  // train.stop_after_epoch ended this invocation
  bool stoppedMidEpoch_ = false;  // the stop came before the epoch's last step
  bool stopped_ = false;          // a stop asked from outside ended this invocation
  std::unique_ptr<StepProfiler> profiler_;  // --profile-steps (rank 0)
  EpochRecord lastEpoch_;                   // for TrainResult's last-epoch figures
  int64_t lastEpochSteps_ = 0;
};

}  // namespace bigbatch::train_detail
