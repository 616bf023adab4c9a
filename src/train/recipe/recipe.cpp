#include "recipe/recipe.h"

#include "recipe/recipe_keys.h"

namespace bigbatch::train_detail {

RunRecipe bindRecipeKeys(const Config& c) {
  RunRecipe r;
  for (const RecipeKey& k : recipeKeys()) {
    if (k.bind) k.bind(c, k.field.key, r);
  }
  return r;
}

// What depends on several keys, or on the world, after every key is bound.
RunRecipe resolveRecipe(const Config& c, int worldSize) {
  RunRecipe r = bindRecipeKeys(c);
  checkDataOptions(r.data);
  r.globalBatch = r.batchPerRank * worldSize * r.accumulation;
  // The peak lr: optim.lr, or optim.lr_per_256 scaled to the global batch.
  r.peakLr = r.lrPer256 > 0 ? linearScaledLr(r.lrPer256, r.globalBatch) : r.configuredLr;
  r.lr.baseLr = r.peakLr;
  r.lr.totalEpochs = static_cast<double>(r.epochs);
  r.optimizer.checkFinite = true;  // SGD too: a non-finite gradient never reaches the weights
  if (r.kfacOn) r.kfac = r.kfacSettings;
  // Dynamic loss scaling: auto means fp16 compute or fp16 on the wire.
  const bool scaled = r.lossScaling == "auto"
                          ? r.precisionName == "fp16" || r.exchangeDtype == "fp16"
                          : r.lossScaling == "on";
  if (scaled) r.lossScaler = r.scalerSettings;
  r.step.accumulation = r.accumulation;
  r.step.precision = r.precision;
  return r;
}

ModelOptions modelOptions(const RunRecipe& r, int64_t channels, int64_t classes) {
  ModelOptions m = r.model;
  m.inChannels = channels;
  m.numClasses = classes;
  return m;
}

LossScalerOptions lossScalerOptions(const Config& c) { return bindRecipeKeys(c).scalerSettings; }

PipelineOptions pipelineOptionsFor(const RunRecipe& r, bool channelsLast) {
  PipelineOptions p = r.pipeline;
  p.channelsLast = channelsLast;
  return p;
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

}  // namespace bigbatch::train_detail
