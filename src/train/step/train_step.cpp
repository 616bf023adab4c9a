#include "step/train_step.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"
#include "step/classification_loss.h"
#include "watch/fault_injection.h"
#include "run/model_state.h"
#include "step/step_graph.h"

namespace bigbatch::train_detail {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The step's micro-batches into the tallies, from one read-back: those with
// a finite loss (and no injected NaN) count. Returns whether any did not.
bool tallyMicroBatches(const std::vector<torch::Tensor>& sums, const std::vector<double>& sizes,
                       bool injectedNan, StepOutcome& out, StepTally& tally) {
  if (sums.empty()) return false;
  const torch::Tensor host = torch::stack(sums).to(torch::kCPU).contiguous();
  const double* v = host.data_ptr<double>();
  bool poisoned = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const double lossSum = v[3 * i], correct = v[3 * i + 1];
    if (injectedNan || !std::isfinite(lossSum)) {
      poisoned = true;
      continue;
    }
    out.lossSum += lossSum;
    tally.lossSum += lossSum;
    tally.correct += correct;
    tally.seen += sizes[i];
  }
  return poisoned;
}

}  // namespace

torch::Tensor forwardGroups(ImageClassifierImpl& model, const torch::Tensor& images, int64_t groups,
                            LayerTap* tap) {
  const int64_t n = images.size(0);
  if (groups <= 1 || n < 2 * groups) {
    const LayerTapScope scope(tap);
    return model.forward(images);
  }
  std::vector<torch::Tensor> parts;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t lo = n * g / groups, hi = n * (g + 1) / groups;
    const LayerTapScope scope(g == 0 ? tap : nullptr);
    parts.push_back(model.forward(images.slice(0, lo, hi)));
  }
  return torch::cat(parts);
}

TrainStep::TrainStep(ImageClassifierImpl& model, DistributedDataParallel& ddp, JobCollectives& job,
                     Optimizer& optimizer, DynamicLossScaler* scaler, StallGuard& guard,
                     Timeline* timeline, FaultInjector& fault, int rank, StepSettings settings)
    : model_(model),
      ddp_(ddp),
      job_(job),
      optimizer_(optimizer),
      scaler_(scaler),
      guard_(guard),
      timeline_(timeline),
      fault_(fault),
      rank_(rank),
      settings_(std::move(settings)) {
  if (settings_.deferOutcome && scaler_) {
    optimizer_.attachLossScale(scaler_->rule(), scaler_->state());
  }
  if (settings_.cudaGraph) {
    // config_schema.cpp refuses the recipes that cannot be captured, naming
    // each reason; what only the run knows is refused here.
    BIGBATCH_REQUIRE(settings_.deferOutcome && optimizer_.kfac() == nullptr &&
                         settings_.accumulation == 1 &&
                         settings_.groups == 1 && !settings_.skipNonFinite,
                     InvalidArgument,
                     "run.cuda_graph: this step cannot be captured (it needs the fused device "
                     "optimizer with its outcome read one step late: one rank, optim.fused, no "
                     "K-FAC or PowerSGD, no per-step loss callback, one micro-batch, one BatchNorm "
                     "group); set run.cuda_graph = false");
    graph_ = std::make_unique<StepGraph>(settings_.device);
  }
  if (KfacPreconditioner* kfac = optimizer_.kfac()) {
    LayerRowsSink sink;
    sink.wants = [kfac](const torch::Tensor& w) { return kfac->covers(w); };
    sink.inputs = [kfac](const torch::Tensor& w, const torch::Tensor& rows) {
      kfac->addActivations(w, rows);
    };
    sink.outputGradients = [kfac](const torch::Tensor& w, const torch::Tensor& rows) {
      kfac->addOutputGradients(w, rows);
    };
    kfacTap_ = std::make_unique<LayerRowsTap>(std::move(sink), settings_.kfacSamples);
  }
}

StepOutcome TrainStep::run(DeviceFeed& feed, const StepPosition& at, const StepHyper& hyper,
                           StepTimes& times, StepTally& tally) {
  guard_.enter(at.globalStep, Heartbeat::kCompute);
  const bool faultNow = fault_.due("step", at.globalStep);
  if (faultNow) fault_.inject("step", at.globalStep);
  if (timeline_) timeline_->setStep(at.globalStep);
  const bool tracing = timeline_ && timeline_->active();
  // A captured step replays full batches after the warm-up; a fault, a
  // short batch or the warm-up itself runs eagerly.
  if (graph_ && !faultNow && at.samples == settings_.graphSamples &&
      eagerSteps_ >= kGraphWarmupSteps) {
    return runGraphed(feed, at, hyper, tracing, times, tally);
  }
  const InjectedNan nan{faultNow && fault_.kind() == "nan_input", faultNow && fault_.kind() == "nan"};
  return runEager(feed, at, hyper, nan, tracing, times, tally, nullptr);
}

StepOutcome TrainStep::runEager(DeviceFeed& feed, const StepPosition& at, const StepHyper& hyper,
                                InjectedNan nan, bool tracing, StepTimes& times, StepTally& tally,
                                PipelineBatch* taken) {
  ++eagerSteps_;
  LossFactor factor;
  factor.value = (scaler_ ? scaler_->scale() : 1.0) / static_cast<double>(at.samples);
  if (settings_.deferOutcome && scaler_) factor.onDevice = lossFactorOnDevice(at.samples);
  // train.nonfinite = skip: the BatchNorm running statistics as they were
  // before this step's forwards, put back if a non-finite loss skips the
  // step — a NaN batch would otherwise leave NaN statistics behind, and
  // every evaluation after it would be NaN (one copy of the model's buffers
  // per step, only under this policy).
  std::vector<torch::Tensor> buffersBefore;
  if (settings_.skipNonFinite) {
    for (const auto& b : model_.buffers()) buffersBefore.push_back(b.detach().clone());
  }
  // Partitioned: the previous step's weight all-gather, which ran while
  // this thread came back here, must be complete before the forward.
  times.comm += ddp_.waitWeights();
  ddp_.zeroGrad();
  const MicroBatches m = forwardBackward(feed, at, factor, nan, tracing, times, taken);

  const auto tWait = Clock::now();
  guard_.enter(at.globalStep, Heartbeat::kExchange);
  fault_.injectIfDue("exchange", at.globalStep);  // the buckets in flight
  times.comm += ddp_.finishBackward();
  const auto t4 = Clock::now();
  const StepOutcome out =
      settings_.deferOutcome
          ? finishDeferred(m, at, hyper, nan.loss, buffersBefore)
          : finishNow(m, at, hyper, factor.value, nan.loss, buffersBefore, tally);
  const auto t5 = Clock::now();
  times.optimizer += seconds(t4, t5);
  if (tracing) {
    timeline_->record("comm_wait", Timeline::kComputeThread, tWait, t4);
    timeline_->record("optimizer", Timeline::kComputeThread, t4, t5);
  }
  return out;
}

// The loss scale the device's last update left over the step's images (the
// host's copy is a step behind): read by the loss's kernel, never by the
// host.
torch::Tensor TrainStep::lossFactorOnDevice(int64_t samples) {
  torch::NoGradGuard noGrad;
  return optimizer_.deviceLossScale().div(static_cast<double>(samples)).to(torch::kFloat);
}

torch::Tensor TrainStep::forward(const torch::Tensor& images, LayerTap* tap) {
  const AutocastScope autocast(settings_.precision, settings_.device.type());
  return forwardGroups(model_, images, settings_.groups, tap);
}

// The micro-batch's loss times the loss factor; its {loss sum, hits,
// images} row into `m`. A non-finite loss poisons this rank's gradients
// (times NaN, decided on the device), and the exchange carries the NaN to
// every rank: all ranks then see a non-finite gradient in the optimizer's
// norm pass and skip or stop together. A finite loss is multiplied by
// exactly 1.
torch::Tensor TrainStep::lossOf(torch::Tensor logits, const torch::Tensor& labels,
                                const LossFactor& factor, bool nanLoss, MicroBatches& m) {
  logits = logits.to(torch::kFloat);  // the loss in fp32 whatever the compute type
  const torch::Tensor lossSum = crossEntropySum(logits, labels, settings_.labelSmoothing);
  const torch::Tensor scaled =
      factor.onDevice.defined() ? lossSum * factor.onDevice : lossSum * factor.value;
  torch::Tensor loss = scaled * torch::where(torch::isfinite(lossSum.detach()), 1.0,
                                             std::numeric_limits<double>::quiet_NaN());
  if (nanLoss) loss = loss * std::numeric_limits<double>::quiet_NaN();
  const double count = static_cast<double>(labels.size(0));
  m.sums.push_back(torch::stack({lossSum.detach().to(torch::kDouble),
                                 logits.argmax(1).eq(labels).sum().to(torch::kDouble),
                                 torch::full({}, count, lossSum.options().dtype(torch::kDouble))}));
  m.sizes.push_back(count);
  return loss;
}

TrainStep::MicroBatches TrainStep::forwardBackward(DeviceFeed& feed, const StepPosition& at,
                                                   const LossFactor& factor, InjectedNan nan,
                                                   bool tracing, StepTimes& times,
                                                   PipelineBatch* taken) {
  // Each micro-batch's loss sum, top-1 hits and images stay on the device
  // (until one read-back after the update, or — deferred — the epoch's
  // end): on a GPU a read-back between forward and backward would make the
  // host wait for the forward before it could queue any of backward.
  MicroBatches m;
  for (int64_t a = 0; a < settings_.accumulation; ++a) {
    const auto t0 = Clock::now();
    ddp_.beginBackward(a == settings_.accumulation - 1);
    PipelineBatch batch;  // the time waited here is the data wait
    if (a == 0 && taken != nullptr) {
      batch = std::move(*taken);
    } else {
      BIGBATCH_CHECK(feed.next(batch), Error, "input pipeline ended before step {} of epoch {}",
                     at.stepInEpoch, at.epoch);
    }
    if (batch.size() == 0) continue;
    torch::Tensor images = batch.images;  // on the model's device
    if (nan.input) images = images * std::numeric_limits<double>::quiet_NaN();  // a corrupt batch
    const auto t1 = Clock::now();
    const torch::Tensor logits = forward(images, a == 0 ? kfacTap_.get() : nullptr);
    // On a GPU the forward is only enqueued: the next micro-batch's copy
    // starts now, while it runs. Taking that batch from the pipeline may
    // wait for it: data time, not forward time.
    const auto tPrefetch = Clock::now();
    feed.prefetch();
    const auto tPrefetched = Clock::now();
    const torch::Tensor loss = lossOf(logits, batch.labels, factor, nan.loss, m);
    const auto t2 = Clock::now();
    loss.backward();
    const auto t3 = Clock::now();
    times.data += seconds(t0, t1) + seconds(tPrefetch, tPrefetched);
    times.forward += seconds(t1, tPrefetch) + seconds(tPrefetched, t2);
    times.backward += seconds(t2, t3);
    if (tracing) {
      timeline_->record("data", Timeline::kComputeThread, t0, t1);
      timeline_->record("forward", Timeline::kComputeThread, t1, t2);
      // Nested inside the forward (only a device feed prefetches).
      if (settings_.device.is_cuda()) {
        timeline_->record("prefetch", Timeline::kComputeThread, tPrefetch, tPrefetched);
      }
      timeline_->record("backward", Timeline::kComputeThread, t2, t3);
    }
  }
  return m;
}

// The update, then one read-back of the step's tallies; a refused step is
// handled at once.
StepOutcome TrainStep::finishNow(const MicroBatches& m, const StepPosition& at,
                                 const StepHyper& hyper, double lossFactor, bool injectNan,
                                 const std::vector<torch::Tensor>& buffersBefore,
                                 StepTally& tally) {
  StepOutcome out;
  // The optimizer unscales the gradients as it reads them, and its norm pass
  // is the overflow check.
  StepHyper h = hyper;
  h.gradScale = scaler_ ? scaler_->inverse() : 1.0;
  if (KfacPreconditioner* kfac = optimizer_.kfac()) {
    // The tapped output gradients carry the loss factor; dividing it out
    // leaves one sample's loss gradient whatever the batch or loss scale.
    kfac->update(job_.allreduceSum(kfac->takeStatistics()), 1.0 / lossFactor);
  }
  out.applied = optimizer_.step(h).applied;
  if (out.applied) ddp_.gatherWeights();  // partitioned only: every rank's updated slices
  if (out.applied && scaler_) updateScale(true);
  const bool poisoned = tallyMicroBatches(m.sums, m.sizes, injectNan, out, tally);
  if (!out.applied && skipOrStop(poisoned, at)) restoreBuffers(buffersBefore);
  return out;
}

// skipOrStop() for a step settled late: the device has already skipped it
// (and backed the loss scale off); what remains is to agree on why and to
// stop the run where the policy says so.
void TrainStep::skipOrStopSettled(bool poisoned, const StepPosition& at, double scaleBefore) {
  const double source = job_.allreduceMax({poisoned ? rank_ + 1.0 : 0.0})[0];
  if (scaler_ && source == 0 && scaleBefore > scaler_->options().minScale) {
    log().debug(
        "step {} (epoch {}): gradients overflowed at loss scale {:g}; skipped, scale now {:g}",
        at.globalStep, at.epoch, scaleBefore, scaler_->scale());
    return;
  }
  // The gradients in memory are the next step's by now: the layer is not named.
  const std::string where =
      source > 0 ? fmt::format("rank {}'s loss was not finite", static_cast<int>(source) - 1)
                 : fmt::format("the gradient's norm was not finite{}",
                               scaler_ ? fmt::format(" at the loss-scale floor {:g}", scaleBefore)
                                       : std::string());
  stopOrWarn(at, where,
             " (seen when the next step was queued: the GPU's outcome is read one step late)");
}

// A diverged step: an Error naming `where`, or skipped with a warning
// under train.nonfinite = skip. `late` says when it was seen, if not now.
void TrainStep::stopOrWarn(const StepPosition& at, const std::string& where, const char* late) {
  if (!settings_.skipNonFinite) {
    BIGBATCH_THROW(Error,
                   "non-finite gradient at epoch {} step {} (global step {}; {}); the weights "
                   "were left unchanged{}. Lower optim.lr, raise schedule.warmup_epochs, or set "
                   "train.nonfinite = skip",
                   at.epoch, at.stepInEpoch, at.globalStep, where, late);
  }
  log().warn("skipped step {} (epoch {}): non-finite gradient ({})", at.globalStep, at.epoch,
             where);
}

// The loss scaler's step, and the codec's memory of past (scaled)
// gradients brought to the new scale when it changed.
void TrainStep::updateScale(bool finite) {
  const double before = scaler_->scale();
  scaler_->update(finite);
  if (scaler_->scale() != before) ddp_.rescaleCodecState(scaler_->scale() / before);
}

// A finite loss whose scaled gradients overflowed is the loss scaler's
// business (back off, skip the step); at the scale's floor, or with a
// non-finite loss on some rank, the training itself diverged — skipped when
// train.nonfinite = skip, otherwise an Error naming where. Every rank is
// here, since the gradients are the same everywhere.
bool TrainStep::skipOrStop(bool poisoned, const StepPosition& at) {
  const double source = job_.allreduceMax({poisoned ? rank_ + 1.0 : 0.0})[0];
  const double scaleBefore = scaler_ ? scaler_->scale() : 1.0;
  if (scaler_ && source == 0 && !scaler_->atFloor()) {
    updateScale(false);
    log().debug(
        "step {} (epoch {}): gradients overflowed at loss scale {:g}; skipped, "
        "scale now {:g}",
        at.globalStep, at.epoch, scaleBefore, scaler_->scale());
    return false;
  }
  const std::string where =
      source > 0 ? fmt::format("rank {}'s loss was not finite", static_cast<int>(source) - 1)
                 : fmt::format("first in '{}'{}", firstNonFiniteGradient(model_),
                               scaler_ ? fmt::format(", at the loss-scale floor {:g}", scaleBefore)
                                       : std::string());
  stopOrWarn(at, where, "");
  return true;
}

void TrainStep::restoreBuffers(const std::vector<torch::Tensor>& before) {
  torch::NoGradGuard noGrad;
  size_t i = 0;
  for (auto& b : model_.buffers()) b.copy_(before.at(i++));
}

}  // namespace bigbatch::train_detail
