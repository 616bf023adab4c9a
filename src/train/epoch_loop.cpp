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
#include "bigbatch/data/sampler.h"
#include "bigbatch/models/scripted_model.h"
#include "bigbatch/schedule/piecewise_linear.h"
#include "bigbatch/train/step_profiler.h"
#include "bigbatch/common/supervision_env.h"
#include "evaluation.h"
#include "model_state.h"
#include "run_checkpointer.h"
#include "step_marker.h"

namespace bigbatch::train_detail {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

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

// What one epoch's steps leave behind on this rank.
struct EpochSteps {
  int64_t globalBatch = 0;  // under the batch-size schedule
  StepTimes times;          // this rank's step-time breakdown
  double trainS = 0;        // wall time of the steps
  double lr = 0;            // of the last step
  double momentum = 0;
};

// The loop over the epochs, on the parts set-up built. Its own state is
// the run's clock and whether train.stop_after_epoch paused it; the run's
// position and totals are run.state, which every checkpoint snapshots.
class EpochLoop {
 public:
  EpochLoop(RunComponents& run, RunRecorder& recorder, const TrainOptions& options)
      : run_(run),
        recorder_(recorder),
        options_(options),
        recipe_(run.recipe),
        state_(run.state),
        rank_(run.start.rank),
        worldSize_(run.start.worldSize),
        stepMarker_(run.lead) {
    if (!options.profilePath.empty() && run.lead) {
      profiler_ = std::make_unique<StepProfiler>(options.profilePath, options.profileFirstStep,
                                                 options.profileLastStep);
    }
  }

  TrainResult run();

 private:
  EpochSteps trainEpoch();
  void trainOneStep(DeviceFeed& feed, int64_t stepsInEpoch, EpochSteps& e);
  void checkpointMidEpoch(int64_t stepsInEpoch);
  void settleSteps();
  // Top-1 and top-5 test accuracy on evaluation epochs.
  std::optional<std::pair<double, double>> evaluateIfDue(double& evalS);
  void agreeOnBatchNormStatistics(std::vector<torch::Tensor>& own);
  EpochRecord closeEpoch(const EpochSteps& e);
  bool stopOrCheckpoint(const EpochRecord& record);
  TrainResult finish();
  // A failing run tells the other ranks and closes its MLPerf log.
  void abortRun(const std::string& message);
  double elapsedNow() const { return run_.elapsedBefore + secondsSince(runStart_); }
  void continueJobClock();
  JobCollectives& job() { return *run_.exchange.job; }
  DistributedDataParallel& ddp() { return *run_.exchange.ddp; }
  DynamicLossScaler* scaler() { return run_.optimization.scaler.get(); }

  RunComponents& run_;
  RunRecorder& recorder_;
  const TrainOptions& options_;
  const RunRecipe& recipe_;
  RunState& state_;
  const int rank_, worldSize_;
  Clock::time_point runStart_;
  StepMarker stepMarker_;  // for the supervisor (--max-restarts)
  bool paused_ = false;  // train.stop_after_epoch ended this invocation
  std::unique_ptr<StepProfiler> profiler_;  // --profile-steps (rank 0)
  EpochRecord lastEpoch_;                   // for TrainResult's last-epoch figures
  int64_t lastEpochSteps_ = 0;
};

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
  settleSteps();
  state_.elapsedS = elapsedNow();
  if (scaler()) state_.lossScale = scaler()->state();
  run_.checkpointer->save(state_);
}

// Test accuracy, top-1 and top-5, on evaluation epochs (every
// train.eval_every, and the last), sharded over the ranks; `evalS` gets the
// seconds it took. In-memory data is evaluated as stored; CIFAR-10 and
// folders through the input pipeline with the validation crop.
std::optional<std::pair<double, double>> EpochLoop::evaluateIfDue(double& evalS) {
  const int64_t epoch = state_.epoch;
  if (epoch % recipe_.evalEvery != 0 && epoch != recipe_.epochs &&
      epoch != recipe_.stopAfterEpoch) {
    return std::nullopt;
  }
  recorder_.evalStart(epoch);
  const auto start = Clock::now();
  std::vector<torch::Tensor> own;
  agreeOnBatchNormStatistics(own);
  EvalSettings evalSettings;
  evalSettings.batch = recipe_.evalBatch;
  evalSettings.channelsLast = recipe_.channelsLast;
  evalSettings.precision = recipe_.precision;
  evalSettings.device = run_.start.device.device;
  evalSettings.rank = rank_;
  evalSettings.worldSize = worldSize_;
  evalSettings.flip = recipe_.evalFlip;
  evalSettings.gpuDecode = run_.input.gpu.get();
  const TrainingData& data = run_.data;
  const EvalCounts mine = data.inMemory()
                              ? evaluateShard(*run_.model, data.testSet, evalSettings)
                              : evaluateSourceShard(*run_.model, data.test, data.evalAugment,
                                                    run_.input.pipeline, evalSettings);
  if (!own.empty()) restoreFloatBuffers(*run_.model, own);
  run_.fault->injectIfDue("evaluation", state_.globalStep);
  const auto sums =
      job().allreduceSum({static_cast<double>(mine.top1), static_cast<double>(mine.top5),
                          static_cast<double>(mine.samples)});
  BIGBATCH_REQUIRE(sums[2] > 0, IoError,
                   "no test sample could be evaluated (every one was skipped as unreadable)");
  const double top1 = sums[0] / sums[2], top5 = sums[1] / sums[2];
  evalS = secondsSince(start);
  if (Timeline* tl = run_.exchange.timeline.get(); tl && tl->active()) {
    tl->record("evaluation", Timeline::kComputeThread, start, Clock::now(),
               fmt::format(R"("epoch":{})", epoch));
  }
  recorder_.evalResult(epoch, top1, top5);
  state_.finalAccuracy = top1;
  state_.bestAccuracy = std::max(state_.bestAccuracy, top1);
  state_.finalTop5 = top5;
  state_.bestTop5 = std::max(state_.bestTop5, top5);
  return std::make_pair(top1, top5);
}

// Every rank evaluates its shard with the same BatchNorm statistics, the
// ones model.pt holds, so the accuracy reported is that of the saved model:
// by default their mean over the ranks, kept (averaging is linear in the
// running averages' updates, so training on from the mean is the mean of
// training on from each); with train.average_bn_stats = false rank 0's,
// each rank's own given back in `own` to restore after the evaluation.
void EpochLoop::agreeOnBatchNormStatistics(std::vector<torch::Tensor>& own) {
  if (worldSize_ == 1) return;
  if (recipe_.averageBnStats) {
    job().averageBuffers(*run_.model, run_.model->frozenParameterNames());
    return;
  }
  own = floatBuffers(*run_.model);
  job().broadcastBuffers(*run_.model, 0, run_.model->frozenParameterNames());
}

// The epoch's totals over the ranks, its evaluation, and its record
// (metrics.csv row and terminal line).
EpochRecord EpochLoop::closeEpoch(const EpochSteps& e) {
  // The exposed wait per rank as min and max, since waiting for a slower
  // rank looks like communication.
  const StepTally& t = state_.epochTally;
  ddp().waitWeights();  // partitioned: the last step's weights, before evaluating them
  const auto totals = job().allreduceSum({t.lossSum, t.correct, t.seen});
  const auto waitMax = job().allreduceMax({e.times.comm, e.trainS});
  const auto waitMin = job().allreduceMin({e.times.comm});
  state_.trainSeconds += waitMax[1];
  state_.trainImages += static_cast<int64_t>(totals[2]);

  EpochRecord r;
  if (const auto acc = evaluateIfDue(r.evalS)) {
    r.testAcc = acc->first;
    r.testTop5 = acc->second;
  }
  r.epoch = state_.epoch;
  r.step = state_.globalStep;
  r.lr = e.lr;
  r.momentum = e.momentum;
  r.trainLoss = totals[0] / totals[2];
  r.trainAcc = totals[1] / totals[2];
  r.epochTimeS = e.trainS;
  r.imgS = totals[2] / waitMax[1];
  r.elapsedS = elapsedNow();
  r.times = e.times;
  r.commWaitMinS = waitMin[0];
  r.commWaitMaxS = waitMax[0];
  r.globalBatch = e.globalBatch;
  r.skippedSteps = state_.epochSkipped;
  r.lossScale = scaler() ? scaler()->scale() : 1.0;
  if (r.epoch == 1) state_.firstLoss = r.trainLoss;
  state_.lastLoss = r.trainLoss;
  state_.epochsDone = r.epoch;
  recorder_.epochRecord(r, recipe_.epochs);
  lastEpoch_ = r;
  return r;
}

// Whether the run stops after this epoch (the target reached, with
// train.stop_at_target); the epoch-end checkpoint when one is due.
bool EpochLoop::stopOrCheckpoint(const EpochRecord& record) {
  bool stop = false;
  const std::optional<double> metric = recipe_.targetTop5 ? record.testTop5 : record.testAcc;
  if (metric && *metric >= recipe_.targetAccuracy && !state_.reachedTarget) {
    state_.reachedTarget = true;
    state_.timeToTargetS = elapsedNow();
    stop = recipe_.stopAtTarget;
  }
  const int64_t epoch = state_.epoch;
  ++state_.epoch;
  state_.stepInEpoch = 0;
  state_.epochTally = {};
  state_.epochSkipped = 0;
  state_.elapsedS = record.elapsedS;
  if (scaler()) state_.lossScale = scaler()->state();
  // train.stop_after_epoch: a pause, checkpointed, that a resume continues.
  if (!stop && epoch == recipe_.stopAfterEpoch && epoch < recipe_.epochs) {
    paused_ = true;
    stop = true;
  }
  const int64_t every = recipe_.ckpt.everyEpochs;
  if (stop || epoch == recipe_.epochs || (every > 0 && epoch % every == 0)) {
    run_.checkpointer->save(state_);
  }
  return stop;
}

// After the last epoch: the timeline, run_stop, model.pt (and a TorchScript
// model's model.jit.pt) and summary.json.
TrainResult EpochLoop::finish() {
  const bool lead = run_.lead;
  run_.checkpointer->flush();  // the last checkpoint on disk before the run reports done
  RunDir* runDir = run_.start.runDir.get();
  if (Timeline* tl = run_.exchange.timeline.get()) {
    // Rank 0 collects every rank's events into one file.
    const auto parts = job().gatherToRoot(tl->eventsJson());
    if (lead) {
      Timeline::write(options_.timelinePath, parts);
      if (recorder_.prints()) {
        fmt::print("timeline ({} rank(s)) written to {}\n", parts.size(), options_.timelinePath);
      }
    }
  }
  TrainResult result;
  state_.copyTo(result);
  result.paused = paused_;
  result.targetAccuracy = recipe_.targetAccuracy;
  result.targetMetric = recipe_.targetTop5 ? "top5" : "top1";
  result.globalBatchSize = recipe_.globalBatch;
  result.worldSize = worldSize_;
  result.runDir = runDir ? runDir->path() : std::string();
  result.trainTimeS = elapsedNow();
  result.throughputImgS =
      state_.trainSeconds > 0 ? static_cast<double>(state_.trainImages) / state_.trainSeconds : 0;
  result.lastEpochImgS = lastEpoch_.imgS;
  result.lastEpochS = lastEpoch_.epochTimeS;
  result.lastEpochSteps = lastEpochSteps_;
  recorder_.closeMlperf(result.reachedTarget ? "success" : "aborted");

  Optimizer& optimizer = *run_.optimization.optimizer;
  RunFacts facts;
  facts.initSeconds = recorder_.initSeconds();
  facts.threadsPerRank = run_.threads.perRank;
  facts.allowedCpusPerRank = run_.threads.fewestAllowedCpus;
  facts.device = run_.start.device.description;

  facts.accumulationSteps = recipe_.accumulation;
  facts.virtualWorkers = recipe_.step.groups;
  facts.optimizer = recipe_.optimizer.name;
  facts.kfac = optimizer.kfac() != nullptr;
  facts.peakLr = recipe_.peakLr;
  facts.precision = precisionName(recipe_.precision);
  facts.exchangeDtype = recipe_.exchangeDtype;
  facts.lossScaling = scaler() != nullptr;
  facts.finalLossScale = scaler() ? scaler()->scale() : 1.0;
  facts.exchangeBytesPerStep = ddp().wireBytesPerStep();
  facts.compression = recipe_.compressionName;
  facts.compressionRatio =
      facts.exchangeBytesPerStep > 0
          ? static_cast<double>(ddp().fp32BytesPerStep()) / facts.exchangeBytesPerStep
          : 1.0;
  facts.partition = ddp().partitioned() ? "optimizer" : "none";
  facts.fusionBytes = static_cast<int64_t>(ddp().fusionBytes());
  facts.optimizerStateBytes = optimizer.stateBytes();
  facts.model = recipe_.modelName;
  facts.parameters = countParameters(*run_.model);
  facts.checkpoints = run_.checkpointer->saves();
  facts.checkpointWaitS = run_.checkpointer->waitSeconds();
  facts.checkpointBackground = recipe_.ckpt.background;
  facts.allreduceTuned = ddp().allreduceChoices();
  ddp().waitWeights();
  // Rank 0's weights and BatchNorm statistics, readable by torch.load.
  if (runDir) saveStateDict(*run_.model, runDir->file("model.pt"), run_.model->tensorAliases());
  // A user's TorchScript module goes back with them, for torch.jit.load.
  auto* scripted = dynamic_cast<ScriptedClassifierImpl*>(run_.model.get());
  if (runDir && scripted) scripted->saveForEvaluation(runDir->file("model.jit.pt"));
  recorder_.summary(result, facts);
  return result;
}

}  // namespace

TrainResult runEpochs(RunComponents& run, RunRecorder& recorder, const TrainOptions& options) {
  return EpochLoop(run, recorder, options).run();
}

}  // namespace bigbatch::train_detail
