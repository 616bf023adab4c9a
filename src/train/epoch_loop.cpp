#include "epoch_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"
#include "bigbatch/data/sampler.h"
#include "bigbatch/models/scripted_model.h"
#include "bigbatch/schedule/piecewise_linear.h"
#include "bigbatch/train/step_profiler.h"
#include "bigbatch/common/supervision_env.h"
#include "evaluation.h"
#include "run/model_state.h"
#include "run/run_checkpointer.h"
#include "run_facts.h"
#include "watch/step_marker.h"
#include "watch/stop_watch.h"

namespace bigbatch::train_detail {
namespace {

// This rank's micro-batches of an epoch from step `firstStep` on, in
// training order: each step's shard cut into `accumulation` parts.
std::vector<std::vector<int64_t>> microBatches(const ShardPlan& plan, int64_t firstStep,
                                               int64_t accumulation) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t s = firstStep; s < plan.steps; ++s) {
    const std::vector<int64_t>& shard = plan.batches[s];
    const int64_t n = static_cast<int64_t>(shard.size());
    for (int64_t a = 0; a < accumulation; ++a) {
      out.emplace_back(shard.begin() + n * a / accumulation,
                       shard.begin() + n * (a + 1) / accumulation);
    }
  }
  return out;
}

}  // namespace

// An attempt that `bigbatch train --max-restarts` restarted: the run's
// seconds so far are the wall clock since the first attempt's run_start (the
// supervisor passes it), not the checkpoint's own count — time to train
// includes the work the failure lost and the restart, as the user waited
// for them.
void EpochLoop::continueJobClock() {
  const char* first = std::getenv(kJobRunStartEnv);
  if (first == nullptr || !run_.start.resume) return;
  const int64_t nowMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  const double sinceFirst = static_cast<double>(nowMs - std::atoll(first)) / 1000.0;
  if (sinceFirst > run_.elapsedBefore) run_.elapsedBefore = sinceFirst;
  const char* restart = std::getenv(kRestartCountEnv);
  log().info("restart {} of a supervised job: time to train counts from the job's first "
             "run_start ({} ms), {:.1f} s ago",
             restart != nullptr ? restart : "?", first, sinceFirst);
}

TrainResult EpochLoop::run() {
  // train.stop_after_epoch on a resume: the checkpoint of that very pause
  // (its invocation ended before its caller saw it) trains nothing and
  // reports the pause again; one past it is refused.
  const int64_t stopAfter = recipe_.stopAfterEpoch;
  const bool atPause = stopAfter > 0 && stopAfter < recipe_.epochs &&
                       state_.epoch == stopAfter + 1 && state_.stepInEpoch == 0;
  BIGBATCH_REQUIRE(stopAfter == 0 || atPause || state_.epoch <= stopAfter, InvalidArgument,
                   "train.stop_after_epoch = {}, but the resumed checkpoint is past it (at epoch "
                   "{}); give a later epoch, or 0 to run the whole budget",
                   stopAfter, state_.epoch);
  paused_ = atPause;
  recorder_.runStart();
  runStart_ = Clock::now();
  continueJobClock();
  // A run that fails part-way still closes its MLPerf log (status aborted).
  try {
    while (state_.epoch <= recipe_.epochs && !paused_) {
      const EpochSteps steps = trainEpoch();
      if (stoppedMidEpoch_) break;
      const EpochRecord record = closeEpoch(steps);
      if (stopOrCheckpoint(record)) break;
    }
  } catch (const std::exception& e) {
    if (!blamesAPeer(e)) {
      abortRun(e.what());
      throw;
    }
    // A peer did not answer in time, or went away (NCCL's asynchronous
    // error): the heartbeat tells which rank stopped.
    const std::string named = fmt::format("{}; {}", e.what(), run_.exchange.stallGuard->diagnose());
    abortRun(named);
    if (dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(named);
    throw PeerError(named);
  }
  return finish();
}

void EpochLoop::abortRun(const std::string& message) {
  // Tell the other ranks, so they fail now instead of at their deadline —
  // from the communication thread, which may still be inside MPI.
  job().postError(message);
  recorder_.runStop("aborted");
}

// The epoch's steps, from where a resume left off, with the mid-epoch
// checkpoints. The batch-size schedule grows each rank's micro-batch.
EpochSteps EpochLoop::trainEpoch() {
  const int64_t epoch = state_.epoch;
  EpochSteps e;
  e.globalBatch = recipe_.globalBatch * run_.optimization.batch->factor(epoch);
  const RunInput& in = run_.input;
  const ShardPlan plan =
      planEpoch(in.source->size(), e.globalBatch, rank_, worldSize_, recipe_.seed, epoch);
  // The CPU pipeline, or under data.decode = "gpu" the GPU decode path:
  // the same micro-batches either way.
  std::vector<std::vector<int64_t>> batches =
      microBatches(plan, state_.stepInEpoch, recipe_.accumulation);
  // TrainOptions::residentBatch: the first micro-batch only, replayed.
  const auto microBatchCount = static_cast<int64_t>(batches.size());
  if (options_.residentBatch && batches.size() > 1) batches.resize(1);
  std::optional<InputPipeline> pipeline;
  std::optional<GpuJpegPipeline> gpuPipeline;
  if (in.gpu) {
    gpuPipeline.emplace(*in.gpu, in.source, in.augment, recipe_.seed, epoch, std::move(batches));
  } else {
    PipelineOptions options = in.pipeline;
    options.uint8Batches = in.uint8Transfer;
    pipeline.emplace(in.source, in.augment, options, recipe_.seed, epoch, std::move(batches),
                     in.cache);
  }
  DeviceFeed feed = gpuPipeline
                        ? DeviceFeed(*gpuPipeline, run_.start.device.device)
                        : DeviceFeed(*pipeline, run_.start.device.device, in.inputType);
  if (options_.residentBatch) feed.replayFirst(microBatchCount);
  recorder_.epochStart(epoch, recipe_.epochs, plan.steps);
  const auto start = Clock::now();
  while (state_.stepInEpoch < plan.steps) {
    trainOneStep(feed, plan.steps, e);
    // A stop at the epoch's last step waits for the epoch to close
    // (stopOrCheckpoint); before it, it stops here.
    if (stopWatch_.due() && state_.stepInEpoch < plan.steps) {
      checkpointNow();
      stoppedMidEpoch_ = stopped_ = true;
      return e;
    }
    checkpointMidEpoch(plan.steps);
  }
  settleSteps();  // on a GPU: the last step's outcome and the epoch's tallies
  e.trainS = secondsSince(start);
  lastEpochSteps_ = plan.steps;
  recorder_.epochStop(epoch);
  return e;
}

void EpochLoop::trainOneStep(DeviceFeed& feed, int64_t stepsInEpoch, EpochSteps& e) {
  RunState& s = state_;
  // Images in this global batch (the last one of an epoch may be short).
  const int64_t samples =
      std::min(e.globalBatch, run_.input.source->size() - s.stepInEpoch * e.globalBatch);
  const double position = static_cast<double>(s.epoch - 1) +
                          static_cast<double>(s.stepInEpoch) / static_cast<double>(stepsInEpoch);
  const RunOptimization& o = run_.optimization;
  const double scheduled = o.lr->at(position);
  e.lr = scheduled * o.batch->lrMultiplier(s.epoch);
  e.momentum = o.momentum->at(position);
  const double decayScale =
      recipe_.decayFollowsLr && recipe_.peakLr > 0 ? scheduled / recipe_.peakLr : 1.0;
  if (profiler_) profiler_->beforeStep(s.globalStep + 1);
  const StepOutcome stepped =
      run_.step->run(feed, {s.epoch, s.stepInEpoch + 1, s.globalStep + 1, samples},
                     {e.lr, e.momentum, decayScale}, e.times, s.epochTally);
  if (profiler_) profiler_->afterStep(s.globalStep + 1);
  if (stepped.settled && !stepped.applied) ++s.epochSkipped;
  ++s.stepInEpoch;
  ++s.globalStep;
  stepMarker_.record(s.globalStep);
  if (options_.onStep) {
    const double global = job().allreduceSum({stepped.lossSum})[0];
    // A skipped step reports NaN: its loss did not move the weights.
    options_.onStep({s.epoch, s.globalStep,
                     stepped.applied ? global / static_cast<double>(samples)
                                     : std::numeric_limits<double>::quiet_NaN(),
                     samples, e.lr});
  }
  // Rank 0's view: its own loss, every rank's images (same shard sizes).
  // Deferred, the tallies are on the device: read when a line is due.
  if (run_.step->deferred() && recorder_.stepLineDue(s.stepInEpoch)) {
    run_.step->settleTally(s.epochTally);
  }
  recorder_.step(s.stepInEpoch, static_cast<int64_t>(s.epochTally.seen) * worldSize_,
                 s.epochTally.lossSum / std::max(s.epochTally.seen, 1.0));
}

// On a GPU (TrainStep::deferred()): the last launched step's outcome and
// the device's tallies into the run's state, which a checkpoint saves and
// the epoch's record reads.
void EpochLoop::settleSteps() {
  const StepOutcome last = run_.step->settle(state_.epochTally);
  if (last.settled && !last.applied) ++state_.epochSkipped;
}

void EpochLoop::checkpointMidEpoch(int64_t stepsInEpoch) {
  const int64_t every = recipe_.ckpt.everySteps;
  if (every <= 0 || state_.globalStep % every != 0 || state_.stepInEpoch >= stepsInEpoch) return;
  checkpointNow();
}

void EpochLoop::checkpointNow() {
  settleSteps();
  state_.elapsedS = elapsedNow();
  if (scaler()) state_.lossScale = scaler()->state();
  run_.checkpointer->save(state_);
}

TrainResult runEpochs(RunComponents& run, RunRecorder& recorder, const TrainOptions& options) {
  return EpochLoop(run, recorder, options).run();
}

}  // namespace bigbatch::train_detail
