#include <algorithm>
#include <cmath>
#include <limits>

#include "training_run.h"

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

TrainResult TrainingRun::run() {
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
  BIGBATCH_MLLOG_END(ml_, mlkey::kInitStop);
  BIGBATCH_MLLOG_START(ml_, mlkey::kRunStart);
  runStart_ = Clock::now();
  runStarted_ = true;
  initSeconds_ = std::chrono::duration<double>(runStart_ - initStart_).count();
  progress_ = Progress(!quiet_);
  // A run that fails part-way still closes its MLPerf log (status aborted).
  try {
    while (state_.epoch <= recipe_.epochs && !paused_) {
      BIGBATCH_MLLOG_START(ml_, mlkey::kBlockStart,
                           {{"first_epoch_num", state_.epoch}, {"epoch_count", 1}});
      BIGBATCH_MLLOG_START(ml_, mlkey::kEpochStart, {{"epoch_num", state_.epoch}});
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
    const std::string named = fmt::format("{}; {}", e.what(), stallGuard_->diagnose());
    abortRun(named);
    if (dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(named);
    throw PeerError(named);
  }
  return finish();
}

void TrainingRun::abortRun(const std::string& message) {
  // Tell the other ranks, so they fail now instead of at their deadline —
  // from the communication thread, which may still be inside MPI.
  job_->postError(message);
  logRunStop("aborted");
}

void TrainingRun::logRunStop(const char* status) {
  if (!runStarted_ || runStopped_.exchange(true)) return;
  BIGBATCH_MLLOG_END(ml_, mlkey::kRunStop, {{"status", status}});
}

// The epoch's steps, from where a resume left off, with the mid-epoch
// checkpoints. The batch-size schedule grows each rank's micro-batch.
EpochSteps TrainingRun::trainEpoch() {
  const int64_t epoch = state_.epoch;
  EpochSteps e;
  e.globalBatch = recipe_.globalBatch * batchSchedule_->factor(epoch);
  const ShardPlan plan =
      planEpoch(trainSource_->size(), e.globalBatch, rank_, worldSize_, recipe_.seed, epoch);
  InputPipeline pipeline(trainSource_, augment_, pipelineOptions_, recipe_.seed, epoch,
                         microBatches(plan, state_.stepInEpoch, recipe_.accumulation), cache_);
  DeviceFeed feed(pipeline, device_.device);
  progress_.startEpoch(epoch, recipe_.epochs, plan.steps);
  const auto start = Clock::now();
  while (state_.stepInEpoch < plan.steps) {
    trainOneStep(feed, plan.steps, e);
    checkpointMidEpoch(plan.steps);
  }
  progress_.finishEpoch();
  e.trainS = secondsSince(start);
  BIGBATCH_MLLOG_END(ml_, mlkey::kEpochStop, {{"epoch_num", epoch}});
  return e;
}

void TrainingRun::trainOneStep(DeviceFeed& feed, int64_t stepsInEpoch, EpochSteps& e) {
  RunState& s = state_;
  // Images in this global batch (the last one of an epoch may be short).
  const int64_t samples =
      std::min(e.globalBatch, trainSource_->size() - s.stepInEpoch * e.globalBatch);
  const double position = static_cast<double>(s.epoch - 1) +
                          static_cast<double>(s.stepInEpoch) / static_cast<double>(stepsInEpoch);
  const double scheduled = lrSchedule_->at(position);
  e.lr = scheduled * batchSchedule_->lrMultiplier(s.epoch);
  e.momentum = momentumSchedule_->at(position);
  const double decayScale =
      recipe_.decayFollowsLr && recipe_.peakLr > 0 ? scheduled / recipe_.peakLr : 1.0;
  const StepOutcome stepped =
      step_->run(feed, {s.epoch, s.stepInEpoch + 1, s.globalStep + 1, samples},
                 {e.lr, e.momentum, decayScale}, e.times, s.epochTally);
  if (!stepped.applied) ++s.epochSkipped;
  ++s.stepInEpoch;
  ++s.globalStep;
  if (options_.onStep) {
    const double global = job_->allreduceSum({stepped.lossSum})[0];
    // A skipped step reports NaN: its loss did not move the weights.
    options_.onStep({s.epoch, s.globalStep,
                     stepped.applied ? global / static_cast<double>(samples)
                                     : std::numeric_limits<double>::quiet_NaN(),
                     samples, e.lr});
  }
  // Rank 0's view: its own loss, every rank's images (same shard sizes).
  progress_.update(s.stepInEpoch, static_cast<int64_t>(s.epochTally.seen) * worldSize_,
                   s.epochTally.lossSum / std::max(s.epochTally.seen, 1.0));
}

void TrainingRun::checkpointMidEpoch(int64_t stepsInEpoch) {
  const int64_t every = recipe_.ckpt.everySteps;
  if (every <= 0 || state_.globalStep % every != 0 || state_.stepInEpoch >= stepsInEpoch) return;
  state_.elapsedS = elapsedNow();
  if (scaler_) state_.lossScale = scaler_->state();
  checkpointer_->save(state_);
}

// Test accuracy, top-1 and top-5, on evaluation epochs (every
// train.eval_every, and the last), sharded over the ranks; `evalS` gets the
// seconds it took. In-memory data is evaluated as stored; CIFAR-10 and
// folders through the input pipeline with the validation crop.
std::optional<std::pair<double, double>> TrainingRun::evaluateIfDue(double& evalS) {
  const int64_t epoch = state_.epoch;
  if (epoch % recipe_.evalEvery != 0 && epoch != recipe_.epochs &&
      epoch != recipe_.stopAfterEpoch) {
    return std::nullopt;
  }
  BIGBATCH_MLLOG_START(ml_, mlkey::kEvalStart, {{"epoch_num", epoch}});
  const auto start = Clock::now();
  std::vector<torch::Tensor> own;
  agreeOnBatchNormStatistics(own);
  EvalSettings evalSettings;
  evalSettings.batch = recipe_.evalBatch;
  evalSettings.channelsLast = recipe_.channelsLast;
  evalSettings.precision = recipe_.precision;
  evalSettings.device = device_.device;
  evalSettings.rank = rank_;
  evalSettings.worldSize = worldSize_;
  evalSettings.flip = recipe_.evalFlip;
  const EvalCounts mine = data_.inMemory()
                              ? evaluateShard(*model_, data_.testSet, evalSettings)
                              : evaluateSourceShard(*model_, data_.test, data_.evalAugment,
                                                    pipelineOptions_, evalSettings);
  if (!own.empty()) restoreFloatBuffers(*model_, own);
  const auto sums =
      job_->allreduceSum({static_cast<double>(mine.top1), static_cast<double>(mine.top5),
                          static_cast<double>(mine.samples)});
  BIGBATCH_REQUIRE(sums[2] > 0, IoError,
                   "no test sample could be evaluated (every one was skipped as unreadable)");
  const double top1 = sums[0] / sums[2], top5 = sums[1] / sums[2];
  evalS = secondsSince(start);
  if (timeline_ && timeline_->active()) {
    timeline_->record("evaluation", Timeline::kComputeThread, start, Clock::now(),
                      fmt::format(R"("epoch":{})", epoch));
  }
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kEvalAccuracy, top1, {{"epoch_num", epoch}, {"top5", top5}});
  BIGBATCH_MLLOG_END(ml_, mlkey::kEvalStop, {{"epoch_num", epoch}});
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
void TrainingRun::agreeOnBatchNormStatistics(std::vector<torch::Tensor>& own) {
  if (worldSize_ == 1) return;
  if (recipe_.averageBnStats) {
    job_->averageBuffers(*model_);
    return;
  }
  own = floatBuffers(*model_);
  job_->broadcastBuffers(*model_, 0);
}

// The epoch's totals over the ranks, its evaluation, and its record
// (metrics.csv row and terminal line).
EpochRecord TrainingRun::closeEpoch(const EpochSteps& e) {
  // The exposed wait per rank as min and max, since waiting for a slower
  // rank looks like communication.
  const StepTally& t = state_.epochTally;
  ddp_->waitWeights();  // partitioned: the last step's weights, before evaluating them
  const auto totals = job_->allreduceSum({t.lossSum, t.correct, t.seen});
  const auto waitMax = job_->allreduceMax({e.times.comm, e.trainS});
  const auto waitMin = job_->allreduceMin({e.times.comm});
  state_.trainSeconds += waitMax[1];
  state_.trainImages += static_cast<int64_t>(totals[2]);

  EpochRecord r;
  if (const auto acc = evaluateIfDue(r.evalS)) {
    r.testAcc = acc->first;
    r.testTop5 = acc->second;
  }
  BIGBATCH_MLLOG_END(ml_, mlkey::kBlockStop, {{"first_epoch_num", state_.epoch}});
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
  r.lossScale = scaler_ ? scaler_->scale() : 1.0;
  if (r.epoch == 1) state_.firstLoss = r.trainLoss;
  state_.lastLoss = r.trainLoss;
  state_.epochsDone = r.epoch;
  if (start_.runDir) start_.runDir->appendMetrics(metricsColumns(), metricsRow(r));
  if (!quiet_) printEpochLine(r, recipe_.epochs);
  return r;
}

// Whether the run stops after this epoch (the target reached, with
// train.stop_at_target); the epoch-end checkpoint when one is due.
bool TrainingRun::stopOrCheckpoint(const EpochRecord& record) {
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
  if (scaler_) state_.lossScale = scaler_->state();
  // train.stop_after_epoch: a pause, checkpointed, that a resume continues.
  if (!stop && epoch == recipe_.stopAfterEpoch && epoch < recipe_.epochs) {
    paused_ = true;
    stop = true;
  }
  const int64_t every = recipe_.ckpt.everyEpochs;
  if (stop || epoch == recipe_.epochs || (every > 0 && epoch % every == 0)) {
    checkpointer_->save(state_);
  }
  return stop;
}

// After the last epoch: the timeline, run_stop, model.pt and summary.json.
TrainResult TrainingRun::finish() {
  if (timeline_) {
    // Rank 0 collects every rank's events into one file.
    const auto parts = job_->gatherToRoot(timeline_->eventsJson());
    if (lead_) {
      Timeline::write(options_.timelinePath, parts);
      if (!quiet_) {
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
  result.runDir = start_.runDir ? start_.runDir->path() : std::string();
  result.trainTimeS = elapsedNow();
  result.throughputImgS =
      state_.trainSeconds > 0 ? static_cast<double>(state_.trainImages) / state_.trainSeconds : 0;
  logRunStop(result.reachedTarget ? "success" : "aborted");
  ml_.close();

  RunFacts facts;
  facts.initSeconds = initSeconds_;
  facts.threadsPerRank = threads_;
  facts.allowedCpusPerRank = allowedCpus_;
  facts.device = device_.description;

  facts.accumulationSteps = recipe_.accumulation;
  facts.virtualWorkers = recipe_.step.groups;
  facts.optimizer = recipe_.optimizer.name;
  facts.kfac = optimizer_->kfac() != nullptr;
  facts.peakLr = recipe_.peakLr;
  facts.precision = precisionName(recipe_.precision);
  facts.exchangeDtype = recipe_.exchangeDtype;
  facts.lossScaling = scaler_.has_value();
  facts.finalLossScale = scaler_ ? scaler_->scale() : 1.0;
  facts.exchangeBytesPerStep = exchangeBytes_;
  facts.partition = ddp_->partitioned() ? "optimizer" : "none";
  facts.fusionBytes = static_cast<int64_t>(ddp_->fusionBytes());
  facts.optimizerStateBytes = optimizer_->stateBytes();
  facts.model = recipe_.modelName;
  facts.parameters = countParameters(*model_);
  ddp_->waitWeights();
  if (start_.runDir) {
    // Rank 0's weights and BatchNorm statistics, readable by torch.load.
    saveStateDict(*model_, start_.runDir->file("model.pt"));
    start_.runDir->writeJson("summary.json", summaryJson(result, facts));
  }
  if (!quiet_) printOutcome(result, facts);
  return result;
}

}  // namespace bigbatch::train_detail
