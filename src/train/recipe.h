// From the resolved config to typed options: RunRecipe holds every key the
// training run reads, resolved once before the first step (nothing in the
// run loop looks a key up by name), and the functions below give each
// component its options (model, learning-rate schedule, optimizer, loss
// scaler, exchange, input pipeline) and the optimizer's MLPerf log keys.
// Internal to src/train; pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/common/config.h"
#include "bigbatch/common/mlperf_logger.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/input_pipeline.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/optim/optimizer.h"
#include "bigbatch/schedule/batch_schedule.h"
#include "bigbatch/schedule/lr_schedule.h"
#include "train_step.h"
#include "training_data.h"

namespace bigbatch::train_detail {

// The MLPerf submission_* keys (mlperf.*); an empty platform means
// "<ranks>x<CPU model>".
struct MlperfSubmission {
  std::string benchmark, org, division, status, platform;
};

// Where checkpoints go and how often (ckpt.*).
struct CheckpointPlan {
  std::string dir;  // empty: <run directory>/checkpoints
  int keep = 2;
  int64_t everyEpochs = 1;  // 0: only at the end
  int64_t everySteps = 0;   // 0: none mid-epoch
};

// Everything the training run reads from its config, typed. The model's
// and the input pipeline's options depend on the data as well and are made
// by modelOptions() and pipelineOptionsFor() once the data is loaded.
struct RunRecipe {
  uint64_t seed = 1;
  int64_t threads = 0;  // run.threads (0: from the CPUs each rank may use, resolved by the run)
  bool channelsLast = true;
  // Data (data.*): the source, how much of it, its augmentation.
  DataOptions data;
  int64_t cacheMb = 0;  // data.cache_mb
  std::string modelName;
  // The batch: images per rank and micro-batch, micro-batches per step.
  int64_t batchPerRank = 1, accumulation = 1;
  int64_t globalBatch = 1;  // ranks × batchPerRank × accumulation
  int64_t epochs = 1;
  double targetAccuracy = 1;
  bool targetTop5 = false;  // train.target_metric = "top5"
  bool stopAtTarget = true;
  int64_t stopAfterEpoch = 0;  // 0: none
  int64_t evalEvery = 1, evalBatch = 1000;
  bool evalFlip = false;  // train.eval_flip
  bool averageBnStats = false;
  // Schedules: the peak lr (optim.lr, or optim.lr_per_256 scaled to the
  // global batch), its warmup and decay, momentum, batch size.
  double peakLr = 0;
  LrScheduleOptions lr;
  std::vector<double> momentumEpochs, momentumValues;
  double momentum = 0;
  BatchScheduleOptions batchSchedule;
  bool decayFollowsLr = false;
  OptimizerOptions optimizer;
  std::optional<KfacOptions> kfac;  // optim.kfac
  Precision precision = Precision::kFp32;
  std::optional<LossScalerOptions> lossScaler;  // when loss scaling is on
  DdpOptions ddp;                               // without callbacks and watchdog
  std::string exchangeDtype;                    // ddp.exchange_dtype, as written
  std::string gpuExchange;                      // ddp.gpu_exchange, as written
  double timeoutS = 60;                         // comm.timeout_s
  StepSettings step;  // accumulation, BN groups, label smoothing, faults, ...
  CheckpointPlan ckpt;
  MlperfSubmission mlperf;
};

// `worldSize` ranks share the global batch.
RunRecipe resolveRecipe(const Config& c, int worldSize);
// The optimizer's hyperparameters under the MLPerf keys of its family
// (sgd_opt_*, lars_*, opt_lamb_*).
void logOptimizer(MlperfLogger& ml, const RunRecipe& r, int64_t decaySteps);

// The model for images of `channels` channels and `classes` classes.
ModelOptions modelOptions(const Config& c, int64_t channels, int64_t classes);
LrScheduleOptions scheduleOptions(const Config& c, double peakLr);
OptimizerOptions optimizerOptions(const Config& c);
// optim.kfac_* (used when optim.kfac is on).
KfacOptions kfacOptions(const Config& c);
LossScalerOptions lossScalerOptions(const Config& c);
// ddp.* and comm.* (the exchange; callbacks and the watchdog are the caller's).
DdpOptions ddpOptionsFor(const Config& c);
// data.*: the input pipeline's threads.
PipelineOptions pipelineOptionsFor(const Config& c, bool channelsLast);
// Whether dynamic loss scaling is on (amp.loss_scaling, where auto means: fp16
// compute or fp16 on the wire).
bool lossScalingEnabled(const Config& c);

}  // namespace bigbatch::train_detail
