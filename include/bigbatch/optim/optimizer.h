// The optimizers of large-batch training behind one interface: SGD (momentum,
// Nesterov), LARS (You, Gitman & Ginsburg 2017, the MLPerf reference form)
// and LAMB (You et al. 2019).
//
// Parameter groups. Every parameter is either "regular" or "excluded";
// excluded ones (by default BatchNorm parameters and biases, i.e. tensors of
// rank <= 1; or those whose name matches `excludePattern`) get no trust ratio,
// their own weight decay (default 0) and their own learning-rate multiplier —
// at batch 4096 the excluded parameters training at 1/100 of the LARS rate
// made the difference between 82 % and 91 % on Fashion-MNIST.
//
// Fused passes (the batched-norm idea of the 2048-GPU ImageNet record): on
// CPU fp32 tensors every per-layer norm comes from one parallel pass over all
// tensors and the update from a second one, instead of several ATen calls per
// tensor. Work is cut into fixed-size chunks summed in a fixed order, so the
// result does not depend on the thread count (ranks with different thread
// counts keep identical weights). LARS also carries each layer's |w|² from
// one update to the next step, so its norm pass reads only the gradients
// while the weights are unchanged in between (src/optim/carried_norms.h;
// any ATen in-place write to a weight drops its carried norm). Anything else
// (another device or dtype, or `fused = false`) takes the per-tensor ATen
// path, which is also the naive baseline of `bigbatch bench optim`.
//
// Optionally (enableKfac) the gradients of linear and convolution weights are
// first turned into K-FAC directions (kfac_preconditioner.h), which the
// optimizer then scales and applies as it would the gradient.
//
// A gradient with an inf or NaN anywhere makes the norm pass non-finite; the
// step is then skipped (weights and state untouched) and reported in
// StepResult — this is also the overflow check of dynamic loss scaling, at no
// extra sweep over the gradients. SGD has no norm pass of its own and checks
// only when `checkFinite` is set (one read of the gradients, 4 bytes per
// value beside the update's 20).
//
// Threading: one trainer thread calls step(); the passes use libtorch's
// intra-op thread pool.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bigbatch/amp/loss_scale_rule.h"
#include "bigbatch/optim/kfac_preconditioner.h"

namespace bigbatch {
namespace optim_detail {
class MultiTensorPlan;
class DeviceStep;
struct FusedTensor;
struct FusedHyper;
}  // namespace optim_detail

struct NamedParameter {
  std::string name;
  torch::Tensor tensor;
  // The rank of the whole parameter when `tensor` is a flat slice of it (a
  // partitioned optimizer's shard); -1: `tensor` is the whole parameter.
  // Exclusion by rank (BatchNorm and biases) reads this, not the slice's.
  int64_t fullDim = -1;
};

// Partitioned optimizer state (ZeRO stage 1: Rajbhandari et al. 2020,
// "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models";
// MoXing's parameter partitioning): the optimizer holds flat slices of the
// layers, and every per-layer quantity — LARS |w| and |g|, LAMB |w| and |u|,
// the gradient norm that is also the non-finite check — is summed from the
// slices' partial squares of every rank in ONE small collective per step, so
// trust ratios and skip decisions are those of the unpartitioned step on
// every rank.
struct ShardReduction {
  std::vector<size_t> layerOf;  // per parameter of the optimizer: its layer's index
  size_t layers = 0;            // layers in the whole model
  // Sums `values` element-wise across the ranks, in place (a collective:
  // every rank calls it with the same length, and gets identical bits).
  std::function<void(std::vector<double>& values)> sum;
};

struct OptimizerOptions {
  std::string name = "sgd";  // sgd | lars | lamb
  double momentum = 0.9;     // sgd, lars (a schedule may override it per step)
  bool nesterov = true;      // sgd
  double weightDecay = 5e-4;
  // Exclusion: when `exclude` is set, a parameter is excluded if its name
  // matches `excludePattern` (ECMAScript regex, searched), or — pattern
  // empty — if it has rank <= 1 (BatchNorm weight and bias, biases).
  bool exclude = true;
  std::string excludePattern;
  double excludedLrScale = 1.0;      // lr multiplier of excluded parameters
  double excludedWeightDecay = 0.0;  // their weight decay
  // LARS: trust = eta·|w| / (|g| + wd·|w| + epsilon).
  double larsEta = 0.001;
  double larsEpsilon = 0.0;
  // LAMB.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-6;
  double phiMin = 0.0;  // trust numerator phi(|w|) = clamp(|w|, phiMin, phiMax)
  double phiMax = 0.0;  // 0: no upper clip
  bool fused = true;
  bool checkFinite = false;  // sgd: one extra gradient pass to detect inf/NaN
};

// The per-step hyperparameters (schedules evaluate them).
struct StepHyper {
  double lr = 0;
  double momentum = -1;           // < 0: OptimizerOptions::momentum
  double weightDecayScale = 1.0;  // multiplies both groups' weight decay
  // Multiplies every gradient as it is read: 1 / loss scale under dynamic
  // loss scaling (amp/loss_scaler.h), so unscaling costs no pass of its own.
  // The fused path never writes the gradients; the per-tensor path scales
  // them in place first.
  double gradScale = 1.0;
};

struct StepResult {
  bool applied = true;     // false: a non-finite gradient, step skipped
  double gradNormSq = -1;  // global squared norm of the (unscaled) gradient, when computed (< 0: not)
};

// A deferred device step's outcome, read after the fact (settleDeferred).
struct DeferredStepResult {
  bool applied = true;
  double gradNormSq = 0;
  // With a loss scale attached: the scale the step unscaled by, and the
  // scaler's state after the device updated it.
  double scaleBefore = 1;
  LossScalerState scaleAfter;
};

class Optimizer {
 public:
  Optimizer(std::vector<NamedParameter> params, OptimizerOptions options);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update from the parameters' .grad(); parameters without a gradient
  // are left alone.
  StepResult step(const StepHyper& hyper);
  // Zeroes gradients in place (never frees them, so views into buckets stay).
  void zeroGrad();

  // Optimizer state ("<param>.<buffer>" and "step") for checkpoints;
  // loadState checks names and shapes and names the first mismatch.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  void loadState(const std::vector<std::pair<std::string, torch::Tensor>>& state);

  const OptimizerOptions& options() const { return options_; }
  // The per-parameter buffers' names ("momentum"; LAMB "exp_avg", "exp_avg_sq").
  const std::vector<std::string>& bufferNames() const { return bufferNames_; }
  const std::vector<NamedParameter>& params() const { return params_; }
  bool excluded(size_t i) const { return excluded_[i]; }
  int64_t steps() const { return steps_; }
  // Whether the next step takes the fused CPU path (false: the device's
  // fused kernels, or per-tensor ATen calls).
  bool fusedEligible() const;
  // Whether it takes the fused kernels of a CUDA device (src/optim/fused_step.h):
  // the CUDA build, parameters in CUDA memory, optim.fused, not partitioned.
  bool deviceFusedEligible() const;
  // The step as those kernels take it: one entry per parameter pointing at
  // its weight, gradient and state, with its group's lr and decay, and the
  // rule's hyperparameters. Public so the tests can run the same table on
  // the host (fusedStepOnHost).
  void describeFusedStep(const StepHyper& h, std::vector<optim_detail::FusedTensor>& tensors,
                         optim_detail::FusedHyper& hyper);

  // The deferred device step (issue 55): for deviceFusedEligible()
  // parameters without K-FAC, the step is queued on the current CUDA
  // stream and the host goes on without waiting for it. prepareDeferred()
  // writes the step's values into device memory — lr, momentum, the decay
  // scale, and LAMB's bias corrections from the applied steps settled so
  // far (so settle the previous step first) — and uploads the tensor table
  // if a gradient moved; launchDeferred() queues the two kernels (a CUDA
  // graph may capture it, and its replays read the values prepareDeferred
  // wrote before each); markDeferred() records the event settleDeferred()
  // waits for. stepDeferred() is the three in a row. settleDeferred()
  // counts the step when it was applied; nullopt when none is pending.
  // With attachLossScale() the kernels unscale by the scale in device
  // memory and update it there (amp/loss_scale_rule.h), and
  // StepHyper::gradScale is ignored. InvalidArgument where the parameters
  // do not qualify, naming why.
  void attachLossScale(const LossScaleRule& rule, const LossScalerState& state);
  void prepareDeferred(const StepHyper& hyper);
  void launchDeferred();
  void markDeferred();
  void stepDeferred(const StepHyper& hyper);
  std::optional<DeferredStepResult> settleDeferred();
  // 0-dim views of that device memory: the loss scale (double; undefined
  // unless attached) and the last launched step's skip flag (int32, 1 =
  // skipped; valid after the first prepareDeferred()).
  torch::Tensor deviceLossScale();
  torch::Tensor deviceSkipped();

  // K-FAC (kfac_preconditioner.h) over the regular parameters of rank 2 and
  // 4 whose factors fit options.maxDim: from then on step() first rewrites
  // those gradients into K-FAC directions, and the factors join state().
  // Statistics reach it through kfac(). Returns what it covers and the cost;
  // InvalidArgument when no candidate fits (naming the smallest factor).
  KfacCoverage enableKfac(const KfacOptions& options);
  KfacPreconditioner* kfac() { return kfac_.get(); }

  // Makes this optimizer one rank's part of a partitioned one (see
  // ShardReduction); every rank's step() then makes exactly one call of
  // `reduction.sum`. Needs the fused path (InvalidArgument at step() when it
  // is not eligible) and no K-FAC.
  void partition(ShardReduction reduction);
  bool partitioned() const { return static_cast<bool>(shards_.sum); }
  // Bytes of optimizer state this optimizer holds (its buffers; K-FAC's
  // factors included).
  int64_t stateBytes() const;

 protected:
  struct Group {
    double lr;
    double weightDecay;
    bool adapt;  // trust ratio applies
  };
  Group group(size_t i, const StepHyper& h) const;
  double momentum(const StepHyper& h) const { return h.momentum >= 0 ? h.momentum : options_.momentum; }

  virtual StepResult stepFused(const StepHyper& h) = 0;
  virtual StepResult stepPerTensor(const StepHyper& h) = 0;
  // The rule and its hyperparameters for the device kernels (gradScale is
  // filled in by the caller).
  virtual void fusedHyper(const StepHyper& h, optim_detail::FusedHyper& out) const = 0;

  // Per-parameter state buffers, each shaped (and strided) like its parameter.
  void addBuffer(const std::string& name);
  torch::Tensor& buffer(size_t b, size_t i) { return buffers_[b][i]; }

  // Raw fp32 pointers of every parameter for the fused path (g null where a
  // parameter has no gradient), and the chunk plan over them.
  struct Pointers {
    float* w;
    const float* g;
    float* b[2];
  };
  std::vector<Pointers> pointers();
  const optim_detail::MultiTensorPlan& plan();

  // Per-parameter partial sums (`width` per parameter) made whole: summed
  // over the ranks' slices of each layer when partitioned, unchanged
  // otherwise. Returns the total of column `totalColumn` over ALL layers of
  // the model (the same on every rank), e.g. the squared gradient norm.
  double sumAcrossShards(std::vector<double>& perParam, int width, int totalColumn);
  // A scalar summed over the ranks when partitioned.
  double sumAcrossShards(double value);

  std::vector<NamedParameter> params_;
  std::vector<bool> excluded_;
  OptimizerOptions options_;
  std::vector<std::string> bufferNames_;
  std::vector<std::vector<torch::Tensor>> buffers_;  // [buffer][param]
  int64_t steps_ = 0;  // applied steps (LAMB's bias-correction t)

 private:
  // Same-layout fp32 dense weights, gradients and buffers (what either
  // fused path indexes element by element).
  bool denseFp32() const;
  StepResult stepOnDevice(const StepHyper& h);
  optim_detail::DeviceStep& deviceStep();
  torch::Device device() const { return params_.front().tensor.device(); }

  std::unique_ptr<optim_detail::MultiTensorPlan> plan_;
  std::unique_ptr<optim_detail::DeviceStep> deviceStep_;
  // The deferred step's rule and hyperparameters, for launchDeferred().
  std::unique_ptr<optim_detail::FusedHyper> deferredHyper_;
  std::unique_ptr<KfacPreconditioner> kfac_;
  ShardReduction shards_;
};

// Whether `p` falls in the excluded group under `options`.
bool isExcludedParameter(const NamedParameter& p, const OptimizerOptions& options);

// Builds the optimizer named by options.name; throws InvalidArgument on an
// unknown name or bad hyperparameters.
std::unique_ptr<Optimizer> makeOptimizer(std::vector<NamedParameter> params,
                                         const OptimizerOptions& options);

// The model's parameters with their names, in registration order.
std::vector<NamedParameter> namedParameters(const torch::nn::Module& module);

}  // namespace bigbatch
