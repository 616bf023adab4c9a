// LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning:
// Training BERT in 76 minutes"), per regular layer at step t:
//   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//   u = (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + ε) + λ·w
//   trust = φ(|w|) / |u|  (1 when |w| or |u| is 0), φ = clamp to [phiMin, phiMax]
//   w ← w − lr·trust·u
// Excluded parameters take trust 1, their own λ and lr multiplier.
//
// Fused: pass 1 reads w, g, m, v and sums |w|², |u|², |g|² with the moments
// it would write (state untouched, so a non-finite gradient skips cleanly);
// pass 2 recomputes u bit-identically, writes m, v and w.
#include <cmath>
#include <limits>

#include "bigbatch/common/error.h"
#include "fused_step.h"
#include "multi_tensor.h"
#include "optimizers.h"

namespace bigbatch::optim_detail {
namespace {

class Lamb final : public Optimizer {
 public:
  Lamb(std::vector<NamedParameter> params, const OptimizerOptions& o)
      : Optimizer(std::move(params), o) {
    BIGBATCH_REQUIRE(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1 && o.epsilon > 0,
                     InvalidArgument,
                     "LAMB needs beta1, beta2 in [0, 1) and epsilon > 0 (got {}, {}, {})", o.beta1,
                     o.beta2, o.epsilon);
    addBuffer("exp_avg");
    addBuffer("exp_avg_sq");
  }

 private:
  double trust(const Group& g, double wNorm, double uNorm) const {
    if (!g.adapt || wNorm == 0 || uNorm == 0) return 1.0;
    const double hi = options_.phiMax > 0 ? options_.phiMax : std::numeric_limits<double>::infinity();
    return std::clamp(wNorm, options_.phiMin, hi) / uNorm;
  }

  kernels::LambCoefficients coefficients(const Group& g, double gradScale) const {
    const double t = static_cast<double>(steps_ + 1);
    return {static_cast<float>(options_.beta1), static_cast<float>(options_.beta2),
            static_cast<float>(1.0 - std::pow(options_.beta1, t)),
            static_cast<float>(1.0 - std::pow(options_.beta2, t)),
            static_cast<float>(options_.epsilon), static_cast<float>(g.weightDecay),
            static_cast<float>(gradScale)};
  }

  StepResult stepFused(const StepHyper& h) override {
    auto ptr = pointers();
    const MultiTensorPlan& p = plan();
    std::vector<kernels::LambCoefficients> k;
    std::vector<Group> groups;
    for (size_t i = 0; i < params_.size(); ++i) {
      groups.push_back(group(i, h));
      k.push_back(coefficients(groups.back(), h.gradScale));
    }
    partials_.assign(p.chunks().size() * 3, 0.0);
    p.forEach([&](size_t c) {
      const Chunk& ch = p.chunks()[c];
      const Pointers& q = ptr[ch.tensor];
      if (!q.g) return;
      kernels::lambNorms(q.w + ch.begin, q.g + ch.begin, q.b[0] + ch.begin, q.b[1] + ch.begin,
                         ch.end - ch.begin, k[ch.tensor], &partials_[3 * c]);
    });
    p.reduce(partials_, 3, norms_);
    StepResult r;
    r.gradNormSq = sumAcrossShards(norms_, 3, 2);
    if (!std::isfinite(r.gradNormSq)) return {false, r.gradNormSq};
    std::vector<float> coeff(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      coeff[i] = static_cast<float>(
          groups[i].lr * trust(groups[i], std::sqrt(norms_[3 * i]), std::sqrt(norms_[3 * i + 1])));
    }
    p.forEach([&](size_t c) {
      const Chunk& ch = p.chunks()[c];
      const Pointers& q = ptr[ch.tensor];
      if (!q.g) return;
      kernels::lambUpdate(q.w + ch.begin, q.g + ch.begin, q.b[0] + ch.begin, q.b[1] + ch.begin,
                          ch.end - ch.begin, k[ch.tensor], coeff[ch.tensor]);
    });
    return r;
  }

  void fusedHyper(const StepHyper& h, FusedHyper& out) const override {
    const kernels::LambCoefficients k = coefficients(Group{0, 0, true}, h.gradScale);
    out.rule = FusedRule::kLamb;
    out.beta1 = k.beta1;
    out.beta2 = k.beta2;
    out.bias1 = k.bias1;
    out.bias2 = k.bias2;
    out.lambEpsilon = k.epsilon;
    out.phiMin = options_.phiMin;
    out.phiMax = options_.phiMax;
  }

  StepResult stepPerTensor(const StepHyper& h) override {
    StepResult r;
    r.gradNormSq = 0;
    for (auto& p : params_) {
      if (p.tensor.grad().defined()) r.gradNormSq += p.tensor.grad().square().sum().item<double>();
    }
    if (!std::isfinite(r.gradNormSq)) return {false, r.gradNormSq};
    const double b1 = options_.beta1, b2 = options_.beta2;
    const double t = static_cast<double>(steps_ + 1);
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& w = params_[i].tensor;
      if (!w.grad().defined()) continue;
      const torch::Tensor& g = w.grad();
      const Group gr = group(i, h);
      torch::Tensor& m = buffer(0, i);
      torch::Tensor& v = buffer(1, i);
      m.mul_(b1).add_(g, 1 - b1);
      v.mul_(b2).addcmul_(g, g, 1 - b2);
      torch::Tensor u = (m / (1 - std::pow(b1, t))) /
                        ((v / (1 - std::pow(b2, t))).sqrt() + options_.epsilon);
      if (gr.weightDecay != 0) u.add_(w, gr.weightDecay);
      const double tr = trust(gr, w.norm().item<double>(), u.norm().item<double>());
      w.sub_(u, gr.lr * tr);
    }
    return r;
  }

  std::vector<double> partials_, norms_;
};

}  // namespace

std::unique_ptr<Optimizer> makeLamb(std::vector<NamedParameter> params, const OptimizerOptions& o) {
  return std::make_unique<Lamb>(std::move(params), o);
}

}  // namespace bigbatch::optim_detail
