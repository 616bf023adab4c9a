// LARS (You, Gitman & Ginsburg 2017, "Large Batch Training of Convolutional
// Networks"), in the MLPerf reference form, per regular (non-excluded) layer:
//   trust = η·|w| / (|g| + β·|w| + ε)   (1 when |w| or |g| is 0)
//   v ← m·v + lr·trust·(g + β·w);  w ← w − v
// Excluded parameters take trust 1, their own β and lr multiplier.
//
// Fused: pass 1 reads g once for every layer's gradient norm and the
// non-finite check (4 bytes per value; w too, 8 bytes, where no carried
// norm is valid — carried_norms.h); pass 2 reads w, g, v and writes w, v
// (20 bytes per value), summing the new |w|² of each adapted layer as it
// goes. Pass 1 must finish before pass 2 starts anywhere: a skipped step
// (inf/NaN) leaves every weight and state value untouched.
#include <cmath>
#include <optional>

#include "bigbatch/common/error.h"
#include "carried_norms.h"
#include "fused_step.h"
#include "multi_tensor.h"
#include "optimizers.h"

namespace bigbatch::optim_detail {
namespace {

class Lars final : public Optimizer {
 public:
  Lars(std::vector<NamedParameter> params, const OptimizerOptions& o)
      : Optimizer(std::move(params), o) {
    BIGBATCH_REQUIRE(o.larsEta > 0 && o.larsEpsilon >= 0, InvalidArgument,
                     "LARS needs eta > 0 and epsilon >= 0 (got {} and {})", o.larsEta,
                     o.larsEpsilon);
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
    if (!carried_) carried_.emplace(params_.size());
    // Which layers need |w| from memory: adapted ones without a valid
    // carried norm (excluded layers take trust 1 and need no |w|).
    readW_.assign(params_.size(), 0);
    for (size_t i = 0; i < params_.size(); ++i) {
      // Partitioned: |w| of each slice is summed with the other ranks'
      // anyway, and another rank's all-gather writes beside the slice.
      readW_[i] =
          ptr[i].g && !excluded_[i] && (partitioned() || !carried_->valid(i, params_[i].tensor));
    }
    // Pass 1 walks from the last layers back: backward wrote the first
    // layers' gradients last, and pass 2 (forward) then starts on what
    // pass 1 left in cache.
    partials_.assign(p.chunks().size() * 2, 0.0);
    p.forEach([&](size_t c) {
      const Chunk& ch = p.chunks()[c];
      const Pointers& q = ptr[ch.tensor];
      if (!q.g) return;
      const int64_t n = ch.end - ch.begin;
      if (readW_[ch.tensor]) {
        kernels::sumSquares(q.w + ch.begin, q.g + ch.begin, n, &partials_[2 * c]);
      } else {
        kernels::sumSquares(q.g + ch.begin, nullptr, n, &partials_[2 * c + 1]);
      }
    }, /*backward=*/true);
    p.reduce(partials_, 2, norms_);
    // The norm pass saw the scaled gradient; gs is a power of two, so
    // |gs·g| = gs·|g| exactly.
    const double gs = h.gradScale;
    StepResult r;
    r.gradNormSq = sumAcrossShards(norms_, 2, 1) * gs * gs;
    if (!std::isfinite(r.gradNormSq)) return {false, r.gradNormSq};

    const float m = static_cast<float>(momentum(h));
    std::vector<float> coeff(params_.size()), decay(params_.size());
    for (size_t i = 0; i < params_.size(); ++i) {
      if (!ptr[i].g) continue;
      const Group gr = group(i, h);
      const double wNormSq = readW_[i] || excluded_[i] ? norms_[2 * i] : carried_->normSq(i);
      coeff[i] = static_cast<float>(
          gr.lr * trust(gr, std::sqrt(wNormSq), std::sqrt(norms_[2 * i + 1]) * gs));
      decay[i] = static_cast<float>(gr.weightDecay);
    }
    updatePartials_.assign(p.chunks().size(), 0.0);
    p.forEach([&](size_t c) {
      const Chunk& ch = p.chunks()[c];
      const Pointers& q = ptr[ch.tensor];
      if (!q.g) return;
      kernels::larsUpdate(q.w + ch.begin, q.g + ch.begin, q.b[0] + ch.begin, ch.end - ch.begin, m,
                          coeff[ch.tensor], decay[ch.tensor], static_cast<float>(gs),
                          excluded_[ch.tensor] || partitioned() ? nullptr : &updatePartials_[c]);
    });
    p.reduce(updatePartials_, 1, newNorms_);
    for (size_t i = 0; i < params_.size() && !partitioned(); ++i) {
      if (ptr[i].g && !excluded_[i]) carried_->store(i, params_[i].tensor, newNorms_[i]);
    }
    return r;
  }

  // The naive form: several ATen calls (and a host sync for each norm) per
  // tensor; the baseline of `bigbatch bench optim` and the non-CPU path.
  void fusedHyper(const StepHyper& h, FusedHyper& out) const override {
    out.rule = FusedRule::kLars;
    out.momentum = static_cast<float>(momentum(h));
    out.eta = options_.larsEta;
    out.epsilon = options_.larsEpsilon;
  }

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

  std::vector<double> partials_, norms_, updatePartials_, newNorms_;
  std::vector<char> readW_;
  std::optional<CarriedNorms> carried_;
};

}  // namespace

std::unique_ptr<Optimizer> makeLars(std::vector<NamedParameter> params, const OptimizerOptions& o) {
  return std::make_unique<Lars>(std::move(params), o);
}

}  // namespace bigbatch::optim_detail
