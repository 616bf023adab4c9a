#include "recipe.h"

namespace bigbatch::train_detail {

ModelOptions modelOptions(const Config& c, int64_t channels, int64_t classes) {
  ModelOptions m;
  m.name = c.getString("model.name");
  m.widths = c.getIntList("model.widths");
  m.blocks = c.getIntList("model.blocks");
  m.inChannels = channels;
  m.numClasses = classes;
  m.bnMomentum = c.getFloat("model.bn_momentum");
  m.bnEps = c.getFloat("model.bn_eps");
  m.zeroInitResidual = c.getBool("model.zero_init_residual");
  m.hidden = c.getInt("model.hidden");
  m.headPool = c.getInt("model.head_pool");
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
  k.maxDim = c.getInt("optim.kfac_max_dim");
  return k;
}

void logOptimizer(MlperfLogger& ml, const RunRecipe& r, int64_t decaySteps) {
  const OptimizerOptions& o = r.optimizer;
  BIGBATCH_MLLOG_POINT(ml, mlkey::kOptName, o.name);
  if (o.name == "lamb") {
    BIGBATCH_MLLOG_POINT(ml, "opt_base_learning_rate", r.peakLr);
    BIGBATCH_MLLOG_POINT(ml, "opt_lamb_beta_1", o.beta1);
    BIGBATCH_MLLOG_POINT(ml, "opt_lamb_beta_2", o.beta2);
    BIGBATCH_MLLOG_POINT(ml, "opt_lamb_epsilon", o.epsilon);
    BIGBATCH_MLLOG_POINT(ml, "opt_lamb_weight_decay_rate", o.weightDecay);
    BIGBATCH_MLLOG_POINT(ml, "opt_lamb_learning_rate_decay_poly_power", r.lr.polyPower);
    BIGBATCH_MLLOG_POINT(ml, "opt_learning_rate_warmup_epochs", r.lr.warmupEpochs);
    return;
  }
  const bool lars = o.name == "lars";
  const std::string p = lars ? "lars_opt_" : "sgd_opt_";
  BIGBATCH_MLLOG_POINT(ml, p + "base_learning_rate", r.peakLr);
  BIGBATCH_MLLOG_POINT(ml, p + "end_learning_rate", r.lr.endLr);
  BIGBATCH_MLLOG_POINT(ml, p + "learning_rate_decay_poly_power", r.lr.polyPower);
  BIGBATCH_MLLOG_POINT(ml, p + "learning_rate_decay_steps", decaySteps);
  BIGBATCH_MLLOG_POINT(ml, p + "weight_decay", o.weightDecay);
  BIGBATCH_MLLOG_POINT(ml, p + "momentum", r.momentum);
  if (lars) {
    BIGBATCH_MLLOG_POINT(ml, "lars_epsilon", o.larsEpsilon);
    BIGBATCH_MLLOG_POINT(ml, "lars_opt_learning_rate_warmup_epochs", r.lr.warmupEpochs);
  } else {
    BIGBATCH_MLLOG_POINT(ml, "opt_learning_rate_warmup_epochs", r.lr.warmupEpochs);
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
  d.partition = c.getString("ddp.partition") == "optimizer";
  const std::string exchange = c.getString("ddp.exchange_dtype");
  d.exchangeType = exchange == "fp16"   ? DataType::kFloat16
                   : exchange == "bf16" ? DataType::kBFloat16
                                        : DataType::kFloat32;
  d.allreduce = c.getString("comm.allreduce");
  d.allreduceTable = c.getString("comm.allreduce_table");
  d.tune = c.getBool("comm.allreduce_tune");
  return d;
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

RunRecipe resolveRecipe(const Config& c, int worldSize) {
  RunRecipe r;
  r.seed = static_cast<uint64_t>(c.getInt("run.seed"));
  r.threads = c.getInt("run.threads");
  r.channelsLast = c.getBool("model.channels_last");
  r.data = dataOptionsFor(c);
  r.cacheMb = c.getInt("data.cache_mb");
  r.modelName = c.getString("model.name");

  r.batchPerRank = c.getInt("train.batch_size");
  r.accumulation = c.getInt("train.accumulation_steps");
  r.globalBatch = r.batchPerRank * worldSize * r.accumulation;
  r.epochs = c.getInt("train.epochs");
  r.targetAccuracy = c.getFloat("train.target_accuracy");
  r.targetTop5 = c.getString("train.target_metric") == "top5";
  r.stopAtTarget = c.getBool("train.stop_at_target");
  r.stopAfterEpoch = c.getInt("train.stop_after_epoch");
  r.evalEvery = c.getInt("train.eval_every");
  r.evalBatch = c.getInt("train.eval_batch_size");
  r.evalFlip = c.getBool("train.eval_flip");
  r.averageBnStats = c.getBool("train.average_bn_stats");

  r.peakLr = c.getFloat("optim.lr_per_256") > 0
                 ? linearScaledLr(c.getFloat("optim.lr_per_256"), r.globalBatch)
                 : c.getFloat("optim.lr");
  r.lr = scheduleOptions(c, r.peakLr);
  r.momentumEpochs = c.getFloatList("schedule.momentum_epochs");
  r.momentumValues = c.getFloatList("schedule.momentum_values");
  r.momentum = c.getFloat("optim.momentum");
  r.batchSchedule = BatchScheduleOptions{c.getIntList("schedule.batch_epochs"),
                                         c.getIntList("schedule.batch_factors"),
                                         c.getString("schedule.batch_lr_rule")};
  r.decayFollowsLr = c.getBool("schedule.weight_decay_follows_lr");

  r.optimizer = optimizerOptions(c);
  r.optimizer.checkFinite = true;  // SGD too: a non-finite gradient never reaches the weights
  if (c.getBool("optim.kfac")) r.kfac = kfacOptions(c);
  r.precision = parsePrecision(c.getString("amp.precision"));
  if (lossScalingEnabled(c)) r.lossScaler = lossScalerOptions(c);
  r.ddp = ddpOptionsFor(c);
  r.exchangeDtype = c.getString("ddp.exchange_dtype");
  r.gpuExchange = c.getString("ddp.gpu_exchange");
  r.timeoutS = c.getFloat("comm.timeout_s");

  r.step.accumulation = r.accumulation;
  r.step.groups = c.getInt("train.virtual_workers");
  r.step.labelSmoothing = c.getFloat("train.label_smoothing");
  r.step.precision = r.precision;
  r.step.skipNonFinite = c.getString("train.nonfinite") == "skip";
  r.step.kfacSamples = c.getInt("optim.kfac_samples");
  r.step.faultKind = c.getString("fault.kind");  // tests and docs/RELIABILITY.md
  r.step.faultRank = static_cast<int>(c.getInt("fault.rank"));
  r.step.faultStep = c.getInt("fault.step");

  r.ckpt.dir = c.getString("ckpt.dir");
  r.ckpt.keep = static_cast<int>(c.getInt("ckpt.keep"));
  r.ckpt.everyEpochs = c.getInt("ckpt.every_epochs");
  r.ckpt.everySteps = c.getInt("ckpt.every_steps");

  r.mlperf.benchmark = c.getString("mlperf.submission_benchmark");
  r.mlperf.org = c.getString("mlperf.submission_org");
  r.mlperf.division = c.getString("mlperf.submission_division");
  r.mlperf.status = c.getString("mlperf.submission_status");
  r.mlperf.platform = c.getString("mlperf.submission_platform");
  return r;
}

}  // namespace bigbatch::train_detail
