// LARS (You, Gitman & Ginsburg 2017, "Large Batch Training of Convolutional
// Networks"), in the MLPerf reference form, per regular (non-excluded) layer:
//   trust = η·|w| / (|g| + β·|w| + ε)   (1 when |w| or |g| is 0)
//   v ← m·v + lr·trust·(g + β·w);  w ← w − v
// Excluded parameters take trust 1, their own β and lr multiplier.
//
// Fused: pass 1 reads w and g once for every layer's two norms (8 bytes per
// value); pass 2 reads w, g, v and writes w, v (20 bytes per value).
#include <cmath>

#include "bigbatch/common/error.h"
#include "multi_tensor.h"
#include "optimizers.h"

namespace bigbatch::optim_detail {
namespace {

class Lars final : public Optimizer {
 public:
  Lars(std::vector<NamedParameter> params, const OptimizerOptions& o)
      : Optimizer(std::move(params), o) {
    BIGBATCH_CHECK(o.larsEta > 0 && o.larsEpsilon >= 0, InvalidArgument,
                   "LARS needs eta > 0 and epsilon >= 0 (got {} and {})", o.larsEta, o.larsEpsilon);
    addBuffer("momentum");
  }

 private:
  double trust(const Group& g, double wNorm, double gNorm) const {
    if (!g.adapt || wNorm == 0 || gNorm == 0) return 1.0;
    return options_.larsEta * wNorm / (gNorm + g.weightDecay * wNorm + options_.larsEpsilon);
  }

  StepResult stepFused(const StepHyper& h) override {
    auto ptr = pointers();
    const MultiTensorPlan& p = plan();
    partials_.assign(p.chunks().size() * 2, 0.0);
    p.forEach([&](size_t c) {
      const Chunk& ch = p.chunks()[c];
      const Pointers& q = ptr[ch.tensor];
      if (q.g) {
        kernels::sumSquares(q.w + ch.begin, q.g + ch.begin, ch.end - ch.begin, &partials_[2 * c]);
      }
    });
    p.reduce(partials_, 2, norms_);
    // The norm pass saw the scaled gradient; gs is a power of two, so
    // |gs·g| = gs·|g| exactly.
    const double gs = h.gradScale;
    StepResult r;
    r.gradNormSq = sumColumn(norms_, 2, 1) * gs * gs;
    if (!std::isfinite(r.gradNormSq)) return {false, r.gradNormSq};

    const float m = static_cast<float>(momentum(h));
    std::vector<float> coeff(params_.size()), decay(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      const Group gr = group(i, h);
      coeff[i] = static_cast<float>(
          gr.lr * trust(gr, std::sqrt(norms_[2 * i]), std::sqrt(norms_[2 * i + 1]) * gs));
      decay[i] = static_cast<float>(gr.weightDecay);
    }
    p.forEach([&](size_t c) {
      const Chunk& ch = p.chunks()[c];
      const Pointers& q = ptr[ch.tensor];
      if (!q.g) return;
      kernels::larsUpdate(q.w + ch.begin, q.g + ch.begin, q.b[0] + ch.begin, ch.end - ch.begin, m,
                          coeff[ch.tensor], decay[ch.tensor], static_cast<float>(gs));
    });
    return r;
  }

  // The naive form: several ATen calls (and a host sync for each norm) per
  // tensor; the baseline of bench/optim_bench and the non-CPU path.
  StepResult stepPerTensor(const StepHyper& h) override {
    std::vector<double> wNorm(params_.size(), 0), gNorm(params_.size(), 0);
    StepResult r;
    r.gradNormSq = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const torch::Tensor& w = params_[i].tensor;
      if (!w.grad().defined()) continue;
      gNorm[i] = w.grad().norm().item<double>();
      wNorm[i] = w.norm().item<double>();
      r.gradNormSq += gNorm[i] * gNorm[i];
    }
    if (!std::isfinite(r.gradNormSq)) return {false, r.gradNormSq};
    const double m = momentum(h);
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& w = params_[i].tensor;
      if (!w.grad().defined()) continue;
      const Group gr = group(i, h);
      torch::Tensor d = gr.weightDecay != 0 ? w.grad().add(w, gr.weightDecay) : w.grad();
      torch::Tensor& v = buffer(0, i);
      v.mul_(m).add_(d, gr.lr * trust(gr, wNorm[i], gNorm[i]));
      w.sub_(v);
    }
    return r;
  }

  std::vector<double> partials_, norms_;
};

}  // namespace

std::unique_ptr<Optimizer> makeLars(std::vector<NamedParameter> params, const OptimizerOptions& o) {
  return std::make_unique<Lars>(std::move(params), o);
}

}  // namespace bigbatch::optim_detail
