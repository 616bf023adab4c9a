// SGD with momentum, optional Nesterov, and decoupled per-group weight decay
// exclusion, in the PyTorch formulation:
//   g ← ∇ + wd·w;  v ← m·v + g;  w ← w − lr·(nesterov ? g + m·v : v)
// BatchNorm parameters and biases (tensors of rank ≤ 1) take no weight decay
// by default. Single-threaded use: one trainer thread calls step().
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace bigbatch {

struct SgdOptions {
  double momentum = 0.9;
  double weightDecay = 5e-4;
  bool nesterov = true;
  bool excludeBnAndBias = true;  // no weight decay on rank ≤ 1 tensors
};

class Sgd {
 public:
  Sgd(std::vector<torch::Tensor> params, SgdOptions options);
  Sgd(const Sgd&) = delete;
  Sgd& operator=(const Sgd&) = delete;

  // Applies one update with learning rate `lr` from the params' .grad().
  void step(double lr);
  // Zeroes gradients in place (never frees them, so views stay valid).
  void zeroGrad();

  const SgdOptions& options() const { return options_; }
  const std::vector<torch::Tensor>& momentumBuffers() const { return momentum_; }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> momentum_;
  std::vector<bool> decay_;
  SgdOptions options_;
};

}  // namespace bigbatch
