// SGD with momentum and optional Nesterov, in PyTorch's form:
//   d = g + wd·w;  v = m·v + d;  w -= lr·(nesterov ? d + m·v : v)
// Fused: one pass reading w, g, v and writing w, v (20 bytes per value); with
// checkFinite a gradient-norm pass before it (4 more), which is also the
// overflow check of dynamic loss scaling.
#include <cmath>

#include "fused_step.h"
#include "multi_tensor.h"
#include "optimizers.h"

namespace bigbatch::optim_detail {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(std::vector<NamedParameter> params, const OptimizerOptions& o)
      : Optimizer(std::move(params), o) {
    addBuffer("momentum");
  }

 private:
  StepResult stepFused(const StepHyper& h) override {
    auto ptr = pointers();
    const MultiTensorPlan& p = plan();
    StepResult r;
    if (options_.checkFinite) {
      partials_.assign(p.chunks().size(), 0.0);
      p.forEach([&](size_t c) {
        const Chunk& ch = p.chunks()[c];
        if (ptr[ch.tensor].g) {
          kernels::sumSquares(ptr[ch.tensor].g + ch.begin, nullptr, ch.end - ch.begin,
                              &partials_[c]);
        }
      });
      r.gradNormSq = sumAcrossShards(sumColumn(partials_, 1, 0)) * h.gradScale * h.gradScale;
      if (!std::isfinite(r.gradNormSq)) return {false, r.gradNormSq};
    }
    const float m = static_cast<float>(momentum(h));
    std::vector<Group> groups;
    for (size_t i = 0; i < params_.size(); ++i) groups.push_back(group(i, h));
    p.forEach([&](size_t c) {
      const Chunk& ch = p.chunks()[c];
      const Pointers& q = ptr[ch.tensor];
      if (!q.g) return;
      const Group& gr = groups[ch.tensor];
      kernels::sgdUpdate(q.w + ch.begin, q.g + ch.begin, q.b[0] + ch.begin, ch.end - ch.begin,
                         static_cast<float>(gr.lr), m, static_cast<float>(gr.weightDecay),
                         options_.nesterov, static_cast<float>(h.gradScale));
    });
    return r;
  }

  void fusedHyper(const StepHyper& h, FusedHyper& out) const override {
    out.rule = FusedRule::kSgd;
    out.momentum = static_cast<float>(momentum(h));
    out.nesterov = options_.nesterov ? 1 : 0;
  }

  StepResult stepPerTensor(const StepHyper& h) override {
    StepResult r;
    if (options_.checkFinite) {
      double s = 0;
      for (auto& p : params_) {
        if (p.tensor.grad().defined()) s += p.tensor.grad().square().sum().item<double>();
      }
      r.gradNormSq = s;
      if (!std::isfinite(s)) return {false, s};
    }
    const double m = momentum(h);
    for (size_t i = 0; i < params_.size(); ++i) {
      torch::Tensor& w = params_[i].tensor;
      if (!w.grad().defined()) continue;
      const Group gr = group(i, h);
      torch::Tensor d = gr.weightDecay != 0 ? w.grad().add(w, gr.weightDecay) : w.grad();
      torch::Tensor& v = buffer(0, i);
      v.mul_(m).add_(d);
      if (options_.nesterov) {
        w.sub_(d.add(v, m), gr.lr);
      } else {
        w.sub_(v, gr.lr);
      }
    }
    return r;
  }

  std::vector<double> partials_;
};

}  // namespace

std::unique_ptr<Optimizer> makeSgd(std::vector<NamedParameter> params, const OptimizerOptions& o) {
  return std::make_unique<Sgd>(std::move(params), o);
}

}  // namespace bigbatch::optim_detail
