// From the resolved config to typed options: RunRecipe holds every key the
// training run reads, resolved once before the first step (nothing in the
// run loop looks a key up by name). Each key is bound to its field where it
// is declared (recipe_keys.h), so this file names no key: resolveRecipe()
// runs the table and derives what depends on several keys or on the world
// (the global batch, the peak lr, whether loss scaling is on); the
// functions below give the components whose options need the data as well
// (model, input pipeline) theirs, and the optimizer its MLPerf log keys.
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
#include "watch/fault_injection.h"
#include "step/train_step.h"
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
  bool background = true;   // the write behind the step (ckpt/background_writer.h)
};

// Everything the training run reads from its config, typed. The model's
// and the input pipeline's options depend on the data as well and are made
// by modelOptions() and pipelineOptionsFor() once the data is loaded.
struct RunRecipe {
  uint64_t seed = 1;
  int64_t threads = 0;  // run.threads (0: from the CPUs each rank may use, resolved by the run)
  bool cudaGraph = false;        // run.cuda_graph
  std::string fusedBn = "auto";  // model.fused_bn: auto | on | off
  bool channelsLast = true;
  // Data (data.*): the source, how much of it, its augmentation.
  DataOptions data;
  int64_t cacheMb = 0;  // data.cache_mb
  std::string modelName;
  // model.*: inChannels and numClasses are the data's (modelOptions()).
  ModelOptions model;
  // data.*_threads, data.prefetch_batches, data.bad_samples; channelsLast
  // and pinMemory are the run's (pipelineOptionsFor()).
  PipelineOptions pipeline;
  std::string transfer = "auto";  // data.transfer: uint8 or float batches to the device
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
  double configuredLr = 0.1, lrPer256 = 0;  // optim.lr, optim.lr_per_256: peakLr's sources
  LrScheduleOptions lr;
  std::vector<double> momentumEpochs, momentumValues;
  double momentum = 0;
  BatchScheduleOptions batchSchedule;
  bool decayFollowsLr = false;
  OptimizerOptions optimizer;
  std::optional<KfacOptions> kfac;  // optim.kfac
  bool kfacOn = false;              // optim.kfac, and the optim.kfac_* keys:
  KfacOptions kfacSettings;         // kfac when it is on
  Precision precision = Precision::kFp32;
  std::string precisionName = "fp32";           // amp.precision, as written
  std::optional<LossScalerOptions> lossScaler;  // when loss scaling is on
  std::string lossScaling = "auto";             // amp.loss_scaling, and the amp.* keys:
  LossScalerOptions scalerSettings;             // lossScaler when it is on
  DdpOptions ddp;                               // without callbacks and watchdog
  std::string exchangeDtype;                    // ddp.exchange_dtype, as written
  std::string compressionName = "none";         // ddp.compression, as written
  std::string gpuExchange;                      // ddp.gpu_exchange, as written
  double timeoutS = 60;                         // comm.timeout_s
  StepSettings step;  // accumulation, BN groups, label smoothing, ...
  CheckpointPlan ckpt;
  FaultPlan fault;
  MlperfSubmission mlperf;
};

// Every key of recipe_keys.h in its place, the derived fields not yet.
RunRecipe bindRecipeKeys(const Config& c);
// `worldSize` ranks share the global batch.
RunRecipe resolveRecipe(const Config& c, int worldSize);
// The optimizer's hyperparameters under the MLPerf keys of its family
// (sgd_opt_*, lars_*, opt_lamb_*).
void logOptimizer(MlperfLogger& ml, const RunRecipe& r, int64_t decaySteps);

// The model for images of `channels` channels and `classes` classes.
ModelOptions modelOptions(const RunRecipe& r, int64_t channels, int64_t classes);
// amp.*: the loss scaler's options (whether it is on is RunRecipe::lossScaler).
LossScalerOptions lossScalerOptions(const Config& c);
// data.*: the input pipeline's threads; `channelsLast` the batches' layout.
PipelineOptions pipelineOptionsFor(const RunRecipe& r, bool channelsLast);

}  // namespace bigbatch::train_detail
