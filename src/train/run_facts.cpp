#include "run_facts.h"

#include "bigbatch/amp/precision.h"
#include "bigbatch/models/model_options.h"
#include "run/run_checkpointer.h"

namespace bigbatch::train_detail {

RunFacts collectRunFacts(RunComponents& run, const RunRecorder& recorder) {
  const RunRecipe& recipe = run.recipe;
  DistributedDataParallel& ddp = *run.exchange.ddp;
  const DynamicLossScaler* scaler = run.optimization.scaler.get();
  Optimizer& optimizer = *run.optimization.optimizer;
  RunFacts facts;
  facts.initSeconds = recorder.initSeconds();
  facts.threadsPerRank = run.threads.perRank;
  facts.allowedCpusPerRank = run.threads.fewestAllowedCpus;
  facts.device = run.start.device.description;

  facts.accumulationSteps = recipe.accumulation;
  facts.virtualWorkers = recipe.step.groups;
  facts.optimizer = recipe.optimizer.name;
  facts.kfac = optimizer.kfac() != nullptr;
  facts.peakLr = recipe.peakLr;
  facts.precision = precisionName(recipe.precision);
  facts.exchangeDtype = recipe.exchangeDtype;
  facts.lossScaling = scaler != nullptr;
  facts.finalLossScale = scaler ? scaler->scale() : 1.0;
  facts.exchangeBytesPerStep = ddp.wireBytesPerStep();
  facts.compression = recipe.compressionName;
  facts.compressionRatio =
      facts.exchangeBytesPerStep > 0
          ? static_cast<double>(ddp.fp32BytesPerStep()) / facts.exchangeBytesPerStep
          : 1.0;
  facts.partition = ddp.partitioned() ? "optimizer" : "none";
  facts.fusionBytes = static_cast<int64_t>(ddp.fusionBytes());
  facts.optimizerStateBytes = optimizer.stateBytes();
  facts.model = recipe.modelName;
  facts.parameters = countParameters(*run.model);
  facts.checkpoints = run.checkpointer->saves();
  facts.checkpointWaitS = run.checkpointer->waitSeconds();
  facts.checkpointBackground = recipe.ckpt.background;
  facts.allreduceTuned = ddp.allreduceChoices();
  return facts;
}

}  // namespace bigbatch::train_detail
