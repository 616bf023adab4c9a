// RunRecorder: everything a run records about itself goes through here —
// rank 0's MLPerf log (mlperf.log: init_start .. init_stop is the set-up,
// run_start .. run_stop the score), the live progress of an epoch, one
// metrics.csv row and one terminal line per epoch, and at the end
// summary.json and the closing line. The file formats are run_report.h's;
// this class decides when each is written, so a reader finds the run's
// whole record in one place.
//
// Ranks other than 0 hold one too: their MLPerf log stays closed, their
// progress and lines are silent, and they have no run directory.
//
// Internal to src/train. Threading: the training thread, except
// runStop(), which the stall watchdog may call from its own thread
// (run_stop is written once, whichever thread comes first).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "bigbatch/common/mlperf_logger.h"
#include "bigbatch/train/progress.h"
#include "bigbatch/train/run_dir.h"
#include "recipe/recipe.h"
#include "run/run_report.h"

namespace bigbatch::train_detail {

class RunRecorder {
 public:
  // Set-up begins now (the MLPerf clock's init_start).
  RunRecorder();

  // startRun() opens it on rank 0, once the run directory exists.
  MlperfLogger& mlperf() { return ml_; }
  // After the ranks agree: rank 0's run directory (null elsewhere) and
  // whether this rank prints (rank 0 without --quiet).
  void attach(RunDir* runDir, bool prints);
  bool prints() const { return prints_; }

  // cache_clear and init_start.
  void initStart();
  // The submission and the recipe (MLPerf's hyperparameter keys).
  void recipe(const RunRecipe& r, int worldSize, int64_t trainSamples, int64_t evalSamples,
              int64_t decaySteps);
  // init_stop and run_start: the score's clock starts.
  void runStart();
  double initSeconds() const { return initSeconds_; }

  // An epoch: block_start/epoch_start, the progress bar over its steps,
  // epoch_stop.
  void epochStart(int64_t epoch, int64_t epochs, int64_t steps);
  void step(int64_t step, int64_t images, double meanLoss) {
    progress_.update(step, images, meanLoss);
  }
  // Whether step() would print a progress line now.
  bool stepLineDue(int64_t step) const { return progress_.due(step); }
  void epochStop(int64_t epoch);

  void evalStart(int64_t epoch);
  void evalResult(int64_t epoch, double top1, double top5);

  // block_stop, the metrics.csv row and the terminal line.
  void epochRecord(const EpochRecord& r, int64_t epochs);

  // run_stop with its status ("success" or "aborted"), once, and only
  // after run_start.
  void runStop(const char* status);
  // run_stop if not yet written, then the MLPerf log is closed.
  void closeMlperf(const char* status);

  // summary.json and the closing line.
  void summary(const TrainResult& result, const RunFacts& facts);

 private:
  using Clock = std::chrono::steady_clock;
  const Clock::time_point initStart_;
  double initSeconds_ = 0;
  MlperfLogger ml_;
  RunDir* runDir_ = nullptr;
  bool prints_ = false;
  Progress progress_{false};
  std::atomic<bool> runStarted_{false}, runStopped_{false};
};

}  // namespace bigbatch::train_detail
