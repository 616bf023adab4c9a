#include <algorithm>
#include <cstdio>

#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/stop_request.h"
#include "bigbatch/models/scripted_model.h"
#include "epoch_loop.h"
#include "evaluation.h"
#include "run/model_state.h"
#include "run/run_checkpointer.h"
#include "run_facts.h"

namespace bigbatch::train_detail {

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
  // A stop asked at the epoch's last step: checkpointed here, at its end.
  if (!stop && epoch < recipe_.epochs && stopWatch_.stopped()) stop = stopped_ = true;
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
  if (stopped_) return finishStopped();
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

  const RunFacts facts = collectRunFacts(run_, recorder_);
  ddp().waitWeights();
  // Rank 0's weights and BatchNorm statistics, readable by torch.load.
  if (runDir) saveStateDict(*run_.model, runDir->file("model.pt"), run_.model->tensorAliases());
  // A user's TorchScript module goes back with them, for torch.jit.load.
  auto* scripted = dynamic_cast<ScriptedClassifierImpl*>(run_.model.get());
  if (runDir && scripted) scripted->saveForEvaluation(runDir->file("model.jit.pt"));
  recorder_.summary(result, facts);
  return result;
}

TrainResult EpochLoop::finishStopped() {
  recorder_.closeMlperf("aborted");
  TrainResult result;
  state_.copyTo(result);
  result.stopped = true;
  result.worldSize = worldSize_;
  result.globalBatchSize = recipe_.globalBatch;
  result.runDir = run_.start.runDir ? run_.start.runDir->path() : std::string();
  result.trainTimeS = elapsedNow();
  if (recorder_.prints()) {
    fmt::print(
        "stopped at step {} (epoch {}) on request (signal {}: SIGUSR1), its checkpoint "
        "written; `--resume auto` continues the run\n",
        state_.globalStep, state_.epoch, kStopSignal);
    std::fflush(stdout);
  }
  return result;
}

}  // namespace bigbatch::train_detail
