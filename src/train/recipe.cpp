#include "recipe.h"

namespace bigbatch::train_detail {

ModelOptions modelOptions(const Config& c, const Dataset& data) {
  ModelOptions m;
  m.name = c.getString("model.name");
  m.widths = c.getIntList("model.widths");
  m.blocks = c.getIntList("model.blocks");
  m.inChannels = data.images.size(1);
  m.numClasses = data.numClasses;
  m.bnMomentum = c.getFloat("model.bn_momentum");
  m.bnEps = c.getFloat("model.bn_eps");
  m.zeroInitResidual = c.getBool("model.zero_init_residual");
  return m;
}

LrScheduleOptions scheduleOptions(const Config& c, double peakLr) {
  LrScheduleOptions s;
  s.baseLr = peakLr;
  s.warmupEpochs = c.getFloat("schedule.warmup_epochs");
  s.warmupStartFactor = c.getFloat("schedule.warmup_start_factor");
  s.decay = c.getString("schedule.decay");
  s.endLr = c.getFloat("schedule.end_lr");
  s.polyPower = c.getFloat("schedule.poly_power");
  s.stepEpochs = c.getIntList("schedule.step_epochs");
  s.stepGamma = c.getFloat("schedule.step_gamma");
  s.totalEpochs = static_cast<double>(c.getInt("train.epochs"));
  return s;
}

OptimizerOptions optimizerOptions(const Config& c) {
  OptimizerOptions o;
  o.name = c.getString("optim.name");
  o.momentum = c.getFloat("optim.momentum");
  o.nesterov = c.getBool("optim.nesterov");
  o.weightDecay = c.getFloat("optim.weight_decay");
  o.exclude = c.getBool("optim.exclude_bn_bias");
  o.excludePattern = c.getString("optim.exclude_pattern");
  o.excludedLrScale = c.getFloat("optim.excluded_lr_scale");
  o.excludedWeightDecay = c.getFloat("optim.excluded_weight_decay");
  o.larsEta = c.getFloat("optim.lars_eta");
  o.larsEpsilon = c.getFloat("optim.lars_epsilon");
  o.beta1 = c.getFloat("optim.beta1");
  o.beta2 = c.getFloat("optim.beta2");
  o.epsilon = c.getFloat("optim.epsilon");
  o.phiMin = c.getFloat("optim.lamb_phi_min");
  o.phiMax = c.getFloat("optim.lamb_phi_max");
  o.fused = c.getBool("optim.fused");
  return o;
}

KfacOptions kfacOptions(const Config& c) {
  KfacOptions k;
  k.damping = c.getFloat("optim.kfac_damping");
  k.decay = c.getFloat("optim.kfac_decay");
  k.inverseInterval = c.getInt("optim.kfac_inverse_interval");
  return k;
}

void logOptimizer(MlperfLogger& ml, const Config& c, double peakLr, int64_t decaySteps) {
  const std::string name = c.getString("optim.name");
  BIGBATCH_MLLOG_POINT(ml, mlkey::kOptName, name);
  if (name == "lamb") {
    BIGBATCH_MLLOG_POINT(ml, "opt_base_learning_rate", peakLr);
    BIGBATCH_MLLOG_POINT(ml, "opt_lamb_beta_1", c.getFloat("optim.beta1"));
    BIGBATCH_MLLOG_POINT(ml, "opt_lamb_beta_2", c.getFloat("optim.beta2"));
    BIGBATCH_MLLOG_POINT(ml, "opt_lamb_epsilon", c.getFloat("optim.epsilon"));
    BIGBATCH_MLLOG_POINT(ml, "opt_lamb_weight_decay_rate", c.getFloat("optim.weight_decay"));
    BIGBATCH_MLLOG_POINT(ml, "opt_lamb_learning_rate_decay_poly_power", c.getFloat("schedule.poly_power"));
    BIGBATCH_MLLOG_POINT(ml, "opt_learning_rate_warmup_epochs", c.getFloat("schedule.warmup_epochs"));
    return;
  }
  const bool lars = name == "lars";
  const std::string p = lars ? "lars_opt_" : "sgd_opt_";
  BIGBATCH_MLLOG_POINT(ml, p + "base_learning_rate", peakLr);
  BIGBATCH_MLLOG_POINT(ml, p + "end_learning_rate", c.getFloat("schedule.end_lr"));
  BIGBATCH_MLLOG_POINT(ml, p + "learning_rate_decay_poly_power", c.getFloat("schedule.poly_power"));
  BIGBATCH_MLLOG_POINT(ml, p + "learning_rate_decay_steps", decaySteps);
  BIGBATCH_MLLOG_POINT(ml, p + "weight_decay", c.getFloat("optim.weight_decay"));
  BIGBATCH_MLLOG_POINT(ml, p + "momentum", c.getFloat("optim.momentum"));
  if (lars) {
    BIGBATCH_MLLOG_POINT(ml, "lars_epsilon", c.getFloat("optim.lars_epsilon"));
    BIGBATCH_MLLOG_POINT(ml, "lars_opt_learning_rate_warmup_epochs", c.getFloat("schedule.warmup_epochs"));
  } else {
    BIGBATCH_MLLOG_POINT(ml, "opt_learning_rate_warmup_epochs", c.getFloat("schedule.warmup_epochs"));
  }
}

LossScalerOptions lossScalerOptions(const Config& c) {
  LossScalerOptions o;
  o.initScale = c.getFloat("amp.init_scale");
  o.growthInterval = c.getInt("amp.growth_interval");
  o.growthFactor = c.getFloat("amp.growth_factor");
  o.backoffFactor = c.getFloat("amp.backoff_factor");
  o.minScale = c.getFloat("amp.min_scale");
  o.maxScale = c.getFloat("amp.max_scale");
  o.hysteresis = c.getInt("amp.hysteresis");
  return o;
}

bool lossScalingEnabled(const Config& c) {
  const std::string mode = c.getString("amp.loss_scaling");
  if (mode == "auto") {
    return c.getString("amp.precision") == "fp16" || c.getString("ddp.exchange_dtype") == "fp16";
  }
  return mode == "on";
}

DdpOptions ddpOptionsFor(const Config& c) {
  DdpOptions d;
  d.fusionBytes = static_cast<size_t>(c.getInt("ddp.fusion_bytes"));
  d.overlap = c.getBool("ddp.overlap");
  const std::string exchange = c.getString("ddp.exchange_dtype");
  d.exchangeType = exchange == "fp16"   ? DataType::kFloat16
                   : exchange == "bf16" ? DataType::kBFloat16
                                        : DataType::kFloat32;
  d.allreduce = c.getString("comm.allreduce");
  d.allreduceTable = c.getString("comm.allreduce_table");
  d.tune = c.getBool("comm.allreduce_tune");
  return d;
}

ImageAugment trainAugment(const Config& c, const Dataset& data) {
  ImageAugment a;
  a.flip = c.getBool("data.flip");
  a.padCrop = c.getInt("data.pad_crop");
  a.mean = {data.mean};
  a.std = {data.std};
  return a;
}

PipelineOptions pipelineOptionsFor(const Config& c, bool channelsLast) {
  PipelineOptions p;
  p.readThreads = static_cast<int>(c.getInt("data.read_threads"));
  p.decodeThreads = static_cast<int>(c.getInt("data.decode_threads"));
  p.augmentThreads = static_cast<int>(c.getInt("data.augment_threads"));
  p.prefetchBatches = static_cast<int>(c.getInt("data.prefetch_batches"));
  p.skipBadSamples = c.getString("data.bad_samples") == "skip";
  p.channelsLast = channelsLast;
  return p;
}

}  // namespace bigbatch::train_detail
