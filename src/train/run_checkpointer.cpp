#include "run_checkpointer.h"

#include <chrono>

#include "bigbatch/common/logging.h"
#include "bigbatch/train/partitioned_state.h"
#include "model_state.h"

namespace bigbatch::train_detail {

RunCheckpointer::RunCheckpointer(torch::nn::Module& model, DistributedDataParallel& ddp,
                                 JobCollectives& job, const Optimizer& optimizer, const Config& config, bool lead,
                                 const std::string& dir, int keep, int worldSize,
                                 int64_t globalBatch)
    : model_(model),
      ddp_(ddp),
      job_(job),
      optimizer_(optimizer),
      config_(config),
      worldSize_(worldSize),
      globalBatch_(globalBatch) {
  if (lead) dir_ = std::make_unique<CheckpointDir>(dir, keep);
}

void RunCheckpointer::save(const RunState& state) {
  ddp_.waitWeights();  // partitioned: the last step's all-gather
  const auto parts = job_.gatherToRoot(packRankState(model_, ddp_.codecState()));
  const auto sums = job_.allreduceSum(
      {state.epochTally.lossSum, state.epochTally.correct, state.epochTally.seen});
  // Collective when partitioned: every rank's slices, made whole.
  NamedTensors optimizerState = wholeOptimizerState(optimizer_, ddp_);
  if (!dir_) return;
  const auto t0 = std::chrono::steady_clock::now();
  Checkpoint k;
  k.config = config_.toToml();
  k.worldSize = worldSize_;
  k.globalBatch = globalBatch_;
  k.epoch = state.epoch;
  k.stepInEpoch = state.stepInEpoch;
  k.globalStep = state.globalStep;
  k.parameters = namedTensors(model_.named_parameters());
  unpackRankStates(parts, k);
  k.optimizer = std::move(optimizerState);
  k.counters = state.toCounters({sums[0], sums[1], sums[2]});
  // The allreduce algorithms tuning chose: a resume keeps them (bit-exact on
  // 3+ ranks, where algorithms sum in different orders).
  for (const auto& [name, value] : ddp_.allreduceTuning()) k.counters[name] = value;
  const std::string path = dir_->save(k);
  log().debug("checkpoint {} written in {:.3f} s", path,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

}  // namespace bigbatch::train_detail
