#include "bigbatch/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <unordered_map>

#include "bigbatch/common/error.h"
#include "device_step.h"
#include "fused_step.h"
#include "multi_tensor.h"
#include "optimizers.h"

namespace bigbatch {

bool isExcludedParameter(const NamedParameter& p, const OptimizerOptions& o) {
  if (!o.exclude) return false;
  if (o.excludePattern.empty()) return (p.fullDim >= 0 ? p.fullDim : p.tensor.dim()) <= 1;
  return std::regex_search(p.name, std::regex(o.excludePattern));
}

std::vector<NamedParameter> namedParameters(const torch::nn::Module& module) {
  std::vector<NamedParameter> out;
  for (const auto& item : module.named_parameters()) out.push_back({item.key(), item.value()});
  return out;
}

Optimizer::Optimizer(std::vector<NamedParameter> params, OptimizerOptions options)
    : params_(std::move(params)), options_(std::move(options)) {
  if (!options_.excludePattern.empty()) {
    try {
      std::regex check(options_.excludePattern);
    } catch (const std::regex_error& e) {
      BIGBATCH_THROW(InvalidArgument, "optim.exclude_pattern '{}' is not a valid regex: {}",
                     options_.excludePattern, e.what());
    }
  }
  for (const auto& p : params_) excluded_.push_back(isExcludedParameter(p, options_));
}

Optimizer::~Optimizer() = default;

void Optimizer::addBuffer(const std::string& name) {
  bufferNames_.push_back(name);
  buffers_.emplace_back();
  for (const auto& p : params_) buffers_.back().push_back(torch::zeros_like(p.tensor.detach()));
}

Optimizer::Group Optimizer::group(size_t i, const StepHyper& h) const {
  if (excluded_[i]) {
    return {h.lr * options_.excludedLrScale, options_.excludedWeightDecay * h.weightDecayScale,
            false};
  }
  return {h.lr, options_.weightDecay * h.weightDecayScale, true};
}

bool Optimizer::fusedEligible() const {
  if (!options_.fused) return false;
  for (const auto& p : params_) {
    if (!p.tensor.device().is_cpu()) return false;
  }
  return denseFp32();
}

bool Optimizer::deviceFusedEligible() const {
  if (!options_.fused || partitioned() || params_.empty() ||
      !optim_detail::DeviceStep::available()) {
    return false;
  }
  for (const auto& p : params_) {
    if (!p.tensor.device().is_cuda() || p.tensor.device() != params_.front().tensor.device()) {
      return false;
    }
  }
  return denseFp32();
}

bool Optimizer::denseFp32() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& w = params_[i].tensor;
    const torch::Tensor& g = w.grad();
    if (w.scalar_type() != torch::kFloat || !w.is_non_overlapping_and_dense()) return false;
    if (!g.defined()) continue;
    if (g.is_sparse() || g.scalar_type() != torch::kFloat || g.strides() != w.strides()) {
      return false;
    }
    for (const auto& b : buffers_) {
      if (b[i].strides() != w.strides()) return false;
    }
  }
  return true;
}

const optim_detail::MultiTensorPlan& Optimizer::plan() {
  if (!plan_) {
    std::vector<int64_t> numels;
    for (const auto& p : params_) numels.push_back(p.tensor.numel());
    plan_ = std::make_unique<optim_detail::MultiTensorPlan>(numels);
  }
  return *plan_;
}

std::vector<Optimizer::Pointers> Optimizer::pointers() {
  std::vector<Pointers> out(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& w = params_[i].tensor;
    out[i].w = w.data_ptr<float>();
    out[i].g = w.grad().defined() ? w.grad().data_ptr<float>() : nullptr;
    for (size_t b = 0; b < 2; ++b) {
      out[i].b[b] = b < buffers_.size() ? buffers_[b][i].data_ptr<float>() : nullptr;
    }
  }
  return out;
}

KfacCoverage Optimizer::enableKfac(const KfacOptions& options) {
  KfacCoverage coverage;
  std::vector<NamedParameter> covered;
  int64_t largest = 0, smallest = 0;  // the larger factor side of the largest / smallest candidate
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& w = params_[i].tensor;
    if (excluded_[i] || (w.dim() != 2 && w.dim() != 4)) continue;
    const int64_t side = std::max(w.size(0), w.numel() / w.size(0));  // max(dim G, dim A)
    smallest = smallest == 0 ? side : std::min(smallest, side);
    if (side <= options.maxDim) {
      covered.push_back(params_[i]);
      continue;
    }
    ++coverage.tooLarge;
    if (side > largest) {
      largest = side;
      coverage.largestSkipped = params_[i].name;
    }
  }
  BIGBATCH_REQUIRE(!covered.empty() || smallest == 0, InvalidArgument,
                   "optim.kfac: no conv or linear weight of this model has K-FAC factors within "
                   "optim.kfac_max_dim = {} (the smallest needs {}); raise optim.kfac_max_dim or "
                   "set optim.kfac = false",
                   options.maxDim, smallest);
  kfac_ = std::make_unique<KfacPreconditioner>(std::move(covered), options);
  coverage.layers = static_cast<int64_t>(kfac_->layers());
  coverage.statisticValues = kfac_->statisticValues();
  return coverage;
}

void Optimizer::partition(ShardReduction reduction) {
  BIGBATCH_REQUIRE(!kfac_, InvalidArgument,
                   "a partitioned optimizer (ddp.partition = optimizer) cannot precondition with "
                   "K-FAC: set optim.kfac = false or ddp.partition = none");
  BIGBATCH_REQUIRE(reduction.sum && reduction.layerOf.size() == params_.size(), InvalidArgument,
                   "partition: {} layer indices for {} parameters", reduction.layerOf.size(),
                   params_.size());
  for (size_t layer : reduction.layerOf) {
    BIGBATCH_REQUIRE(layer < reduction.layers, InvalidArgument,
                     "partition: layer index {} outside 0..{}", layer, reduction.layers);
  }
  shards_ = std::move(reduction);
}

int64_t Optimizer::stateBytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : state()) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

double Optimizer::sumAcrossShards(std::vector<double>& perParam, int width, int totalColumn) {
  if (!partitioned()) return optim_detail::sumColumn(perParam, width, totalColumn);
  std::vector<double> whole(shards_.layers * static_cast<size_t>(width), 0.0);
  for (size_t i = 0; i < params_.size(); ++i) {
    for (int k = 0; k < width; ++k)
      whole[shards_.layerOf[i] * width + k] += perParam[i * width + k];
  }
  shards_.sum(whole);
  for (size_t i = 0; i < params_.size(); ++i) {
    for (int k = 0; k < width; ++k) perParam[i * width + k] = whole[shards_.layerOf[i] * width + k];
  }
  return optim_detail::sumColumn(whole, width, totalColumn);
}

double Optimizer::sumAcrossShards(double value) {
  if (!partitioned()) return value;
  std::vector<double> v{value};
  shards_.sum(v);
  return v[0];
}

StepResult Optimizer::step(const StepHyper& hyper) {
  torch::NoGradGuard noGrad;
  const bool fused = fusedEligible();
  BIGBATCH_REQUIRE(!partitioned() || fused, InvalidArgument,
                   "a partitioned optimizer (ddp.partition = optimizer) needs the fused path "
                   "(fp32 CPU tensors, optim.fused = true); set ddp.partition = none");
  // P(s·∇) = s·P(∇): the loss scale (gradScale) still divides out
  // afterwards, and an inf or NaN still reaches the finite check.
  if (kfac_) kfac_->precondition();
  StepResult r;
  if (fused) {
    r = stepFused(hyper);
  } else if (deviceFusedEligible()) {
    r = stepOnDevice(hyper);
  } else {
    if (hyper.gradScale != 1.0) {
      for (auto& p : params_) {
        if (p.tensor.grad().defined()) p.tensor.mutable_grad().mul_(hyper.gradScale);
      }
    }
    r = stepPerTensor(hyper);
  }
  if (r.applied) ++steps_;
  return r;
}

void Optimizer::describeFusedStep(const StepHyper& h, std::vector<optim_detail::FusedTensor>& out,
                                  optim_detail::FusedHyper& hyper) {
  out.assign(params_.size(), optim_detail::FusedTensor{});
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& w = params_[i].tensor;
    optim_detail::FusedTensor& t = out[i];
    t.w = w.data_ptr<float>();
    t.g = w.grad().defined() ? w.grad().data_ptr<float>() : nullptr;
    t.b0 = buffers_.size() > 0 ? buffers_[0][i].data_ptr<float>() : nullptr;
    t.b1 = buffers_.size() > 1 ? buffers_[1][i].data_ptr<float>() : nullptr;
    t.numel = w.numel();
    const Group g = group(i, h);
    t.lr = g.lr;
    t.decay = g.weightDecay;
    t.adapt = g.adapt ? 1 : 0;
  }
  hyper = optim_detail::FusedHyper{};
  fusedHyper(h, hyper);
  hyper.gradScale = static_cast<float>(h.gradScale);
}

StepResult Optimizer::stepOnDevice(const StepHyper& h) {
  std::vector<optim_detail::FusedTensor> tensors;
  optim_detail::FusedHyper hyper;
  describeFusedStep(h, tensors, hyper);
  const optim_detail::FusedOutcome o = deviceStep().run(tensors, hyper, device());
  return {o.applied, o.gradNormSq};
}

optim_detail::DeviceStep& Optimizer::deviceStep() {
  if (!deviceStep_) deviceStep_ = std::make_unique<optim_detail::DeviceStep>();
  return *deviceStep_;
}

void Optimizer::attachLossScale(const LossScaleRule& rule, const LossScalerState& state) {
  BIGBATCH_REQUIRE(deviceFusedEligible(), InvalidArgument,
                   "a loss scale in device memory needs the fused device step (the CUDA build, "
                   "fp32 parameters on one GPU, optim.fused = true, not partitioned)");
  deviceStep().attachLossScale(rule, state, device());
}

void Optimizer::prepareDeferred(const StepHyper& h) {
  BIGBATCH_REQUIRE(deviceFusedEligible() && !kfac_, InvalidArgument,
                   "the deferred step needs the fused device step (the CUDA build, fp32 "
                   "parameters on one GPU, optim.fused = true, not partitioned) and no K-FAC");
  // The table with each tensor's multipliers: lr 1 and decay scale 1 give
  // group() its factors, which the kernels multiply by the step's values.
  StepHyper unit = h;
  unit.lr = 1.0;
  unit.weightDecayScale = 1.0;
  std::vector<optim_detail::FusedTensor> tensors;
  if (!deferredHyper_) deferredHyper_ = std::make_unique<optim_detail::FusedHyper>();
  describeFusedStep(unit, tensors, *deferredHyper_);
  optim_detail::FusedStepScalars v;
  v.lr = h.lr;
  v.decayScale = h.weightDecayScale;
  v.momentum = deferredHyper_->momentum;
  v.bias1 = deferredHyper_->bias1;
  v.bias2 = deferredHyper_->bias2;
  v.gradScale = static_cast<float>(h.gradScale);
  deviceStep().prepare(tensors, v, device());
}

void Optimizer::launchDeferred() {
  BIGBATCH_CHECK(deferredHyper_ != nullptr, Error, "launchDeferred() before prepareDeferred()");
  deviceStep().launch(*deferredHyper_, device());
}

void Optimizer::markDeferred() { deviceStep().markLaunched(device()); }

void Optimizer::stepDeferred(const StepHyper& h) {
  torch::NoGradGuard noGrad;
  prepareDeferred(h);
  launchDeferred();
  markDeferred();
}

std::optional<DeferredStepResult> Optimizer::settleDeferred() {
  if (!deviceStep_ || !deviceStep_->pending()) return std::nullopt;
  const optim_detail::DeferredOutcome o = deviceStep_->settle();
  if (o.applied) ++steps_;
  return DeferredStepResult{o.applied, o.gradNormSq, o.scaleBefore, o.scaleAfter};
}

torch::Tensor Optimizer::deviceLossScale() { return deviceStep().lossScale(device()); }

torch::Tensor Optimizer::deviceSkipped() { return deviceStep().skipped(device()); }

void Optimizer::zeroGrad() {
  for (auto& p : params_) {
    if (p.tensor.grad().defined()) p.tensor.mutable_grad().zero_();
  }
}

std::vector<std::pair<std::string, torch::Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t b = 0; b < buffers_.size(); ++b) {
    for (size_t i = 0; i < params_.size(); ++i) {
      out.emplace_back(params_[i].name + "." + bufferNames_[b], buffers_[b][i]);
    }
  }
  out.emplace_back("step", torch::tensor(steps_, torch::kInt64));
  if (kfac_) {
    for (auto& entry : kfac_->state()) out.push_back(std::move(entry));
  }
  return out;
}

void Optimizer::loadState(const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  std::map<std::string, torch::Tensor> given(state.begin(), state.end());
  const auto mine = this->state();
  for (const auto& [name, tensor] : mine) {
    auto it = given.find(name);
    BIGBATCH_REQUIRE(it != given.end(), InvalidArgument,
                     "optimizer state has no '{}' (is it from another optimizer or model?)", name);
    BIGBATCH_REQUIRE(it->second.sizes() == tensor.sizes(), InvalidArgument,
                     "optimizer state '{}' has shape {} but this model needs {}", name,
                     c10::str(it->second.sizes()), c10::str(tensor.sizes()));
    given.erase(it);
  }
  BIGBATCH_REQUIRE(given.empty(), InvalidArgument,
                   "optimizer state has {} entries this optimizer does not know, e.g. '{}'",
                   given.size(), given.empty() ? std::string() : given.begin()->first);
  torch::NoGradGuard noGrad;
  std::map<std::string, torch::Tensor> byName(state.begin(), state.end());
  for (size_t b = 0; b < buffers_.size(); ++b) {
    for (size_t i = 0; i < params_.size(); ++i) {
      buffers_[b][i].copy_(byName.at(params_[i].name + "." + bufferNames_[b]));
    }
  }
  steps_ = byName.at("step").item<int64_t>();
  if (kfac_)
    kfac_->loadState(std::unordered_map<std::string, torch::Tensor>(state.begin(), state.end()));
}

std::unique_ptr<Optimizer> makeOptimizer(std::vector<NamedParameter> params,
                                         const OptimizerOptions& o) {
  BIGBATCH_REQUIRE(o.momentum >= 0 && o.momentum < 1, InvalidArgument,
                   "optimizer momentum = {} must lie in [0, 1)", o.momentum);
  BIGBATCH_REQUIRE(o.weightDecay >= 0 && o.excludedWeightDecay >= 0, InvalidArgument,
                   "weight decay must be >= 0 (got {} and {} for excluded parameters)",
                   o.weightDecay, o.excludedWeightDecay);
  if (o.name == "sgd") return optim_detail::makeSgd(std::move(params), o);
  if (o.name == "lars") return optim_detail::makeLars(std::move(params), o);
  if (o.name == "lamb") return optim_detail::makeLamb(std::move(params), o);
  BIGBATCH_THROW(InvalidArgument, "optimizer '{}' is not one of sgd, lars, lamb", o.name);
}

namespace optim_detail {
double sumColumn(const std::vector<double>& values, int width, int k) {
  double s = 0;
  for (size_t i = k; i < values.size(); i += width) s += values[i];
  return s;
}
}  // namespace optim_detail

}  // namespace bigbatch
