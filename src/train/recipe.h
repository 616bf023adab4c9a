// From the resolved config to the options of each component (model,
// learning-rate schedule, optimizer, loss scaler, exchange, input pipeline), and the optimizer's MLPerf log keys.
// Internal to src/train; pure functions, thread-safe.
#pragma once

#include <cstdint>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/common/config.h"
#include "bigbatch/common/mlperf_logger.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/input_pipeline.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/optim/optimizer.h"
#include "bigbatch/schedule/lr_schedule.h"

namespace bigbatch::train_detail {

ModelOptions modelOptions(const Config& c, const Dataset& data);
LrScheduleOptions scheduleOptions(const Config& c, double peakLr);
OptimizerOptions optimizerOptions(const Config& c);
// optim.kfac_* (used when optim.kfac is on).
KfacOptions kfacOptions(const Config& c);
LossScalerOptions lossScalerOptions(const Config& c);
// ddp.* and comm.* (the exchange; callbacks and the watchdog are the caller's).
DdpOptions ddpOptionsFor(const Config& c);
// data.*: the training augmentation of `data` and the pipeline's threads.
ImageAugment trainAugment(const Config& c, const Dataset& data);
PipelineOptions pipelineOptionsFor(const Config& c, bool channelsLast);
// Whether dynamic loss scaling is on (amp.loss_scaling, where auto means: fp16
// compute or fp16 on the wire).
bool lossScalingEnabled(const Config& c);
// The optimizer's hyperparameters under the MLPerf keys of its family
// (sgd_opt_*, lars_*, opt_lamb_*).
void logOptimizer(MlperfLogger& ml, const Config& c, double peakLr, int64_t decaySteps);

}  // namespace bigbatch::train_detail
