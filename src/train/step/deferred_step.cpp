#include <chrono>
#include <vector>

#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"
#include "step/step_graph.h"
#include "step/train_step.h"
#include "watch/fault_injection.h"

// TrainStep's path without host waits (TrainStep::deferred(), the GPU): the
// captured step's replay and capture, and the outcomes read one step late —
// the loss scale and the tallies stay on the device until settle() reads
// them. The eager path and the outcome read at once are in train_step.cpp.
namespace bigbatch::train_detail {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

// run.cuda_graph: the batch into the static input, the previous replay
// settled — the one wait of a captured step, for a replay the host queued
// a whole step ago: the device idles only while the host writes the
// step's values and launches the graph — then the step's values, the
// replay, and the next batch's copy while it runs. The first time, the
// step is captured first.
StepOutcome TrainStep::runGraphed(DeviceFeed& feed, const StepPosition& at, const StepHyper& hyper,
                                  bool tracing, StepTimes& times, StepTally& tally) {
  const auto t0 = Clock::now();
  PipelineBatch batch;
  BIGBATCH_CHECK(feed.next(batch), Error, "input pipeline ended before step {} of epoch {}",
                 at.stepInEpoch, at.epoch);
  if (batch.size() != at.samples ||
      (staticImages_.defined() && !batch.images.sizes().equals(staticImages_.sizes()))) {
    // Samples skipped as unreadable cut this batch: no replay.
    return runEager(feed, at, hyper, InjectedNan{}, tracing, times, tally, &batch);
  }
  const auto t1 = Clock::now();
  {
    torch::NoGradGuard noGrad;
    if (!staticImages_.defined()) {
      staticImages_ = torch::empty_like(batch.images);
      staticLabels_ = torch::empty_like(batch.labels);
    }
    staticImages_.copy_(batch.images);  // on the compute stream, after the replay before it
    staticLabels_.copy_(batch.labels);
  }
  if (!graph_->captured()) captureStep(at);
  // Before the settle (the step's one host wait), while the device still
  // runs the previous replay.
  const std::string moved = graphBindings_.changed(graphTensors());
  BIGBATCH_CHECK(moved.empty(), Error,
                 "run.cuda_graph: step {}: {} since the step was captured, and a captured step "
                 "replays the addresses it was captured with; keep the tensors' storage (copy_ "
                 "into a parameter instead of replacing it) or set run.cuda_graph = false",
                 at.globalStep, moved);
  const StepOutcome out = settlePending();
  const std::vector<NamedParameter>& params = optimizer_.params();
  for (size_t i = 0; i < params.size(); ++i) {
    // The graph's own gradients (an eager step in between made others).
    NamedParameter p = params[i];
    p.tensor.mutable_grad() = staticGrads_[i];
  }
  StepHyper h = hyper;
  h.gradScale = 1.0;  // with a loss scale, the device's
  optimizer_.prepareDeferred(h);
  graph_->replay();
  optimizer_.markDeferred();
  pending_ = Pending{at, graphPoisoned_, false};
  const auto t2 = Clock::now();
  feed.prefetch();
  const auto t3 = Clock::now();
  times.data += seconds(t0, t1) + seconds(t2, t3);
  times.forward += seconds(t1, t2);  // the replay's launch: forward, backward and update
  if (tracing) {
    timeline_->record("data", Timeline::kComputeThread, t0, t1);
    timeline_->record("graph_replay", Timeline::kComputeThread, t1, t2);
    timeline_->record("prefetch", Timeline::kComputeThread, t2, t3);
  }
  return out;
}

// The captured step, after a warm-up pass on the capture stream: gradients
// to none (the captured backward allocates them in the graph's pool, where
// each replay writes them), forward, loss (the scale read from device
// memory), backward, the tallies, the optimizer's kernels (its values read
// from device memory).
void TrainStep::captureStep(const StepPosition& at) {
  if (!tally_.defined()) {
    tally_ = torch::zeros({3}, torch::TensorOptions(torch::kDouble).device(settings_.device));
  }
  const auto forwardBackward = [&] {
    LossFactor factor;
    factor.value = 1.0 / static_cast<double>(at.samples);
    if (scaler_) factor.onDevice = lossFactorOnDevice(at.samples);
    MicroBatches m;
    const torch::Tensor loss =
        lossOf(forward(staticImages_, nullptr), staticLabels_, factor, false, m);
    loss.backward();
    return m;
  };
  // One forward and backward on the capture stream first, as
  // torch.cuda.graph's documentation asks of a warm-up: cuBLAS keeps a
  // workspace per stream and would otherwise allocate it inside the
  // capture. It leaves nothing behind: the model's buffers (BatchNorm's
  // running statistics and counts) are put back and the gradients dropped,
  // so the run trains as it would without it.
  {
    std::vector<torch::Tensor> buffers;
    for (const auto& b : model_.buffers()) buffers.push_back(b.detach().clone());
    ddp_.zeroGrad();
    graph_->warmUp([&] { forwardBackward(); });
    torch::NoGradGuard noGrad;
    size_t i = 0;
    for (auto& b : model_.buffers()) b.copy_(buffers[i++]);
  }
  ddp_.zeroGrad();
  graph_->capture([&] {
    const MicroBatches m = forwardBackward();
    graphPoisoned_ = addToTally(m, false);
    optimizer_.launchDeferred();
  });
  staticGrads_.clear();
  for (const NamedParameter& p : optimizer_.params()) staticGrads_.push_back(p.tensor.grad());
  graphBindings_ = GraphBindings(graphTensors());
  log().debug("step {}: the training step captured as a CUDA graph ({} images)", at.globalStep,
              at.samples);
}

GraphBindings::Named TrainStep::graphTensors() const {
  GraphBindings::Named out;
  for (const NamedParameter& p : optimizer_.params()) out.emplace_back(p.name, p.tensor);
  for (const auto& b : model_.named_buffers()) out.emplace_back(b.key(), b.value());
  for (auto& s : optimizer_.state()) {
    if (s.first != "step") out.push_back(std::move(s));  // "step": a host count, made per call
  }
  out.emplace_back("the static input images", staticImages_);
  out.emplace_back("the static input labels", staticLabels_);
  out.emplace_back("the step's tallies", tally_);
  return out;
}

// The deferred end: the tallies added up on the device, the previous step
// settled (its event was recorded a whole forward and backward ago), this
// step's update queued. Nothing here waits for the device unless the step
// settled was refused.
StepOutcome TrainStep::finishDeferred(const MicroBatches& m, const StepPosition& at,
                                      const StepHyper& hyper, bool injectNan,
                                      const std::vector<torch::Tensor>& buffersBefore) {
  torch::NoGradGuard noGrad;
  Pending next{at, addToTally(m, injectNan), injectNan};
  const StepOutcome out = settlePending();
  StepHyper h = hyper;
  h.gradScale = 1.0;  // with a loss scale, the device's (attached at construction)
  optimizer_.stepDeferred(h);
  if (!buffersBefore.empty()) {
    // train.nonfinite = skip: a skipped step leaves the BatchNorm
    // statistics as they were, decided on the device. (An overflow the
    // loss scaler skips restores them too, unlike the synchronous form:
    // the step is as if it never ran.)
    const torch::Tensor skipped = optimizer_.deviceSkipped().to(torch::kBool);
    size_t i = 0;
    for (auto& b : model_.buffers()) {
      b.copy_(torch::where(skipped, buffersBefore.at(i), b));
      ++i;
    }
  }
  pending_ = std::move(next);
  return out;
}

// The micro-batches with a finite loss into the device's tallies; returns
// whether one was not finite (a bool on the device; undefined without any).
torch::Tensor TrainStep::addToTally(const MicroBatches& m, bool injectNan) {
  if (m.sums.empty()) return {};
  torch::NoGradGuard noGrad;
  const torch::Tensor rows = torch::stack(m.sums);  // [micro-batches, 3]
  torch::Tensor finite = torch::isfinite(rows.select(1, 0));
  if (injectNan) finite = torch::zeros_like(finite);
  const torch::Tensor counted = torch::where(finite.unsqueeze(1), rows, torch::zeros_like(rows));
  if (!tally_.defined()) tally_ = torch::zeros({3}, rows.options());
  tally_.add_(counted.sum(0));
  return finite.logical_not().any();
}

StepOutcome TrainStep::settle(StepTally& tally) {
  if (!settings_.deferOutcome) {
    StepOutcome none;
    none.settled = false;
    return none;
  }
  const StepOutcome out = settlePending();
  settleTally(tally);
  return out;
}

void TrainStep::settleTally(StepTally& tally) {
  if (!tally_.defined()) return;
  // Waits for the work queued so far: at an epoch's end, before a
  // checkpoint, for a progress line.
  const torch::Tensor host = tally_.to(torch::kCPU);
  const double* v = host.data_ptr<double>();
  tally.lossSum += v[0];
  tally.correct += v[1];
  tally.seen += v[2];
  tally_.zero_();
}

// The step launched last: its outcome (normally long done), the host's
// copy of the loss scaler brought to the device's, and a refused step
// handled as the synchronous form would.
StepOutcome TrainStep::settlePending() {
  StepOutcome out;
  const std::optional<DeferredStepResult> r = optimizer_.settleDeferred();
  if (!r) {
    out.settled = false;
    return out;
  }
  BIGBATCH_CHECK(pending_.has_value(), Error, "a deferred step settled with no step recorded");
  const Pending p = std::move(*pending_);
  pending_.reset();
  out.applied = r->applied;
  if (scaler_) scaler_->loadState(r->scaleAfter);
  if (!r->applied) {
    // A refused step reads back whether a loss was not finite: a wait for
    // the device, on refused steps only.
    const bool poisoned = p.injectedNan || (p.poisoned.defined() && p.poisoned.item<bool>());
    skipOrStopSettled(poisoned, p.at, r->scaleBefore);
  }
  return out;
}

}  // namespace bigbatch::train_detail
