// TrainingRun: one training run on one rank, the object behind train()
// (include/bigbatch/train/trainer.h). Its set-up — ranks, data, model,
// exchange, optimizer, the restore of a resume — is in trainer.cpp; its run
// — epochs of steps, evaluation, records and checkpoints, then the run's
// files — in epoch_loop.cpp.
//
// Internal to src/train. Threading: the training thread only, except
// logRunStop(), which the stall watchdog may call from its own thread
// (run_stop is written once).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/amp/precision.h"
#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/collectives/collectives.h"
#include "bigbatch/common/cpu_affinity.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/hash.h"
#include "bigbatch/common/mlperf_logger.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/input_pipeline.h"
#include "bigbatch/data/sampler.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/optim/optimizer.h"
#include "bigbatch/schedule/batch_schedule.h"
#include "bigbatch/schedule/lr_schedule.h"
#include "bigbatch/schedule/piecewise_linear.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/train/partitioned_state.h"
#include "bigbatch/train/progress.h"
#include "bigbatch/train/timeline.h"
#include "bigbatch/train/trainer.h"
#include "evaluation.h"
#include "gpu_exchange.h"
#include "model_state.h"
#include "recipe.h"
#include "run_checkpointer.h"
#include "run_report.h"
#include "run_start.h"
#include "run_state.h"
#include "stall_guard.h"
#include "train_step.h"

namespace bigbatch::train_detail {

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

// One training run on one rank. The constructor is the set-up (MLPerf
// init_start .. init_stop: ranks, data, model, exchange, optimizer, the
// restore of a resume); run() is the run (run_start .. run_stop): epochs of
// steps, evaluation, records and checkpoints, then the run's files.
//
// The run's position and totals live in one RunState, which every
// checkpoint snapshots and a resume restores; everything the run reads
// from its config was resolved once into `recipe_`.
class TrainingRun {
 public:
  TrainingRun(const Config& config, const TrainOptions& options, TrainingJob job);
  TrainResult run();

 private:
  // Set-up, in this order.
  void resolveThreads();
  void loadData(TrainingJob& job);
  void prepareModel(TrainingJob& job);
  void prepareExchange();
  void restoreOrVerify();
  void prepareOptimizer();
  void logRecipe();
  void printBanner() const;

  // The epoch loop's parts.
  EpochSteps trainEpoch();
  void trainOneStep(DeviceFeed& feed, int64_t stepsInEpoch, EpochSteps& e);
  void checkpointMidEpoch(int64_t stepsInEpoch);
  // Top-1 and top-5 test accuracy on evaluation epochs.
  std::optional<std::pair<double, double>> evaluateIfDue(double& evalS);
  EpochRecord closeEpoch(const EpochSteps& e);
  bool stopOrCheckpoint(const EpochRecord& record);
  TrainResult finish();
  double elapsedNow() const { return elapsedBefore_ + secondsSince(runStart_); }
  int64_t decaySteps() const;
  void agreeOnBatchNormStatistics(std::vector<torch::Tensor>& own);
  // A failing run tells the other ranks and closes its MLPerf log.
  void abortRun(const std::string& message);
  // run_stop, once (the stall watchdog may write it from its thread).
  void logRunStop(const char* status);

  Config config_;  // a resume on another world size adjusts the accumulation steps
  const TrainOptions& options_;
  const Clock::time_point initStart_;
  Clock::time_point runStart_;
  double initSeconds_ = 0;
  MlperfLogger ml_;  // stays closed (silent) on ranks other than 0
  RunStart start_;
  RunDevice device_;  // run.device
  Communicator* comm_ = nullptr;
  int rank_ = 0, worldSize_ = 1;
  bool lead_ = true, quiet_ = false;
  RunRecipe recipe_;
  int64_t threads_ = 1;
  int64_t allowedCpus_ = 1;  // the fewest CPUs any rank may run on

  TrainingData data_;
  std::shared_ptr<ImageClassifierImpl> model_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<StallGuard> stallGuard_;
  std::unique_ptr<NcclLink> nccl_;  // ddp.gpu_exchange = NCCL; outlives ddp_
  std::unique_ptr<JobCollectives> job_;  // its communication thread outlives ddp_
  std::unique_ptr<DistributedDataParallel> ddp_;
  int64_t exchangeBytes_ = 0;  // gradient bytes each rank hands to the allreduce per step
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<KfacCoverage> kfacCoverage_;  // with optim.kfac

  std::optional<DynamicLossScaler> scaler_;
  std::unique_ptr<LrSchedule> lrSchedule_;
  std::unique_ptr<PiecewiseLinear> momentumSchedule_;
  std::unique_ptr<BatchSchedule> batchSchedule_;
  std::shared_ptr<const ImageSource> trainSource_;
  std::shared_ptr<DecodedCache> cache_;  // data.cache_mb
  ImageAugment augment_;
  PipelineOptions pipelineOptions_;
  std::unique_ptr<RunCheckpointer> checkpointer_;
  std::unique_ptr<TrainStep> step_;
  Progress progress_{false};

  RunState state_;
  double elapsedBefore_ = 0;  // run seconds of the sessions before a resume
  bool paused_ = false;       // train.stop_after_epoch ended this invocation
  std::atomic<bool> runStarted_{false}, runStopped_{false};
};

}  // namespace bigbatch::train_detail
