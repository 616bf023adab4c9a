#include "run/run_checkpointer.h"

#include <chrono>

#include "bigbatch/common/logging.h"
#include "bigbatch/train/partitioned_state.h"
#include "bigbatch/train/resume.h"
#include "run/model_state.h"

namespace bigbatch::train_detail {

namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

RunCheckpointer::RunCheckpointer(ImageClassifierImpl& model, DistributedDataParallel& ddp,
                                 JobCollectives& job, const Optimizer& optimizer,
                                 const Config& config, FaultInjector& fault, bool lead,
                                 const std::string& dir, const std::string& runDir, int keep,
                                 bool background, int worldSize, int64_t globalBatch)
    : model_(model),
      frozen_(model.frozenParameterNames()),
      ddp_(ddp),
      job_(job),
      optimizer_(optimizer),
      config_(config),
      fault_(fault),
      worldSize_(worldSize),
      globalBatch_(globalBatch),
      background_(background),
      owner_(runDir.empty() ? std::string() : checkpointOwner(runDir)) {
  if (lead) {
    writer_ =
        std::make_unique<BackgroundCheckpointWriter>(std::make_unique<CheckpointDir>(dir, keep));
  }
}

void RunCheckpointer::save(const RunState& state) {
  const auto t0 = std::chrono::steady_clock::now();
  ++saves_;
  // fault.during = checkpoint on the writing rank fires with the write
  // truly in flight: after its first chunk is in the temporary file (a
  // crash then leaves a torn file, and the previous checkpoint the newest).
  const bool faultDue = fault_.due("checkpoint", state.globalStep);
  const bool holdWrite = faultDue && writer_ && background_;
  ddp_.waitWeights();  // partitioned: the last step's all-gather
  const auto parts = job_.gatherToRoot(packRankState(model_, ddp_.codecState(), frozen_));
  const auto sums = job_.allreduceSum(
      {state.epochTally.lossSum, state.epochTally.correct, state.epochTally.seen});
  // Collective when partitioned: every rank's slices, made whole.
  NamedTensors optimizerState = wholeOptimizerState(optimizer_, ddp_);
  if (writer_) {
    Checkpoint k;
    k.config = config_.toToml();
    k.runDir = owner_;
    k.worldSize = worldSize_;
    k.globalBatch = globalBatch_;
    k.epoch = state.epoch;
    k.stepInEpoch = state.stepInEpoch;
    k.globalStep = state.globalStep;
    k.parameters = namedTensors(model_.named_parameters());
    for (auto& entry : frozenTensors(model_, frozen_)) k.parameters.push_back(std::move(entry));
    unpackRankStates(parts, k);
    k.optimizer = std::move(optimizerState);
    k.counters = state.toCounters({sums[0], sums[1], sums[2]});
    // The allreduce algorithms tuning chose: a resume keeps them (bit-exact
    // on 3+ ranks, where algorithms sum in different orders).
    for (const auto& [name, value] : ddp_.allreduceTuning()) k.counters[name] = value;
    // In the background, the next step changes the weights and the
    // optimizer state in place: the writer gets copies of its own.
    if (holdWrite) writer_->holdMidWrite();
    if (background_) {
      writer_->submit(snapshotCheckpoint(k));
    } else {
      writer_->submit(std::move(k));
      writer_->wait();
    }
    log().debug("checkpoint of step {}: training waited {:.4f} s for it{}", state.globalStep,
                secondsSince(t0), background_ ? " (writing it in the background)" : "");
  }
  waitS_ += secondsSince(t0);
  if (faultDue) {
    if (holdWrite && !writer_->waitHeldMidWrite()) {
      log().warn("fault.during = checkpoint: the write ended before its first chunk was held");
    }
    fault_.inject("checkpoint", state.globalStep);
  }
}

void RunCheckpointer::flush() {
  if (!writer_) return;
  const auto t0 = std::chrono::steady_clock::now();
  writer_->wait();
  waitS_ += secondsSince(t0);
  if (!writer_->lastPath().empty()) {
    log().debug("checkpoint {} written in {:.3f} s", writer_->lastPath(), writer_->lastSeconds());
  }
}

}  // namespace bigbatch::train_detail
