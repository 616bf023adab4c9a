#include "run_checkpointer.h"

#include <chrono>

#include "bigbatch/common/logging.h"
#include "model_state.h"

namespace bigbatch::train_detail {

RunCheckpointer::RunCheckpointer(torch::nn::Module& model, DistributedDataParallel& ddp,
                                 const Optimizer& optimizer, const Config& config, bool lead,
                                 const std::string& dir, int keep, int worldSize,
                                 int64_t globalBatch)
    : model_(model),
      ddp_(ddp),
      optimizer_(optimizer),
      config_(config),
      worldSize_(worldSize),
      globalBatch_(globalBatch) {
  if (lead) dir_ = std::make_unique<CheckpointDir>(dir, keep);
}

void RunCheckpointer::save(const ResumePosition& at, const StepTally& epochSoFar,
                           RunTotals totals) {
  const auto parts = ddp_.gatherToRoot(packRankState(model_));
  const auto sums = ddp_.allreduceSum({epochSoFar.lossSum, epochSoFar.correct, epochSoFar.seen});
  if (!dir_) return;
  const auto t0 = std::chrono::steady_clock::now();
  Checkpoint k;
  k.config = config_.toToml();
  k.worldSize = worldSize_;
  k.globalBatch = globalBatch_;
  k.epoch = at.nextEpoch;
  k.stepInEpoch = at.stepInEpoch;
  k.globalStep = at.globalStep;
  k.parameters = namedTensors(model_.named_parameters());
  unpackRankStates(parts, k);
  k.optimizer = optimizer_.state();
  totals.epochLoss = sums[0];
  totals.epochCorrect = sums[1];
  totals.epochSeen = sums[2];
  k.counters = totals.toCounters();
  const std::string path = dir_->save(k);
  log().debug("checkpoint {} written in {:.3f} s", path,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace bigbatch::train_detail
