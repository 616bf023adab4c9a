#include "bigbatch/optim/sgd.h"

namespace bigbatch {

Sgd::Sgd(std::vector<torch::Tensor> params, SgdOptions options)
    : params_(std::move(params)), options_(options) {
  for (const auto& p : params_) {
    momentum_.push_back(torch::zeros_like(p));
    decay_.push_back(!(options_.excludeBnAndBias && p.dim() <= 1));
  }
}

void Sgd::step(double lr) {
  torch::NoGradGuard noGrad;
  const double m = options_.momentum;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& w = params_[i];
    if (!w.grad().defined()) continue;
    torch::Tensor g = w.grad();
    if (decay_[i] && options_.weightDecay != 0) g = g.add(w, options_.weightDecay);
    torch::Tensor& v = momentum_[i];
    v.mul_(m).add_(g);
    if (options_.nesterov) {
      w.add_(g.add(v, m), -lr);
    } else {
      w.add_(v, -lr);
    }
  }
}

void Sgd::zeroGrad() {
  for (auto& p : params_) {
    if (p.grad().defined()) p.mutable_grad().zero_();
  }
}

}  // namespace bigbatch
