// A layer tap (layer_tap.h) that turns what each tapped layer reads, and the
// gradient of what it produces, into matrix rows — the raw material of
// Kronecker-factored curvature (K-FAC, optim/kfac_preconditioner.h):
//
//   input rows     one per sample (linear) or per sample and output position
//                  (convolution: its im2col patch, channels outermost, so a
//                  row lines up with the weight's [out, in·kh·kw] flattening)
//   gradient rows  the loss gradient of the layer's output at the same
//                  sample (and position): [rows, out]
//
// so that a layer's weight gradient from those samples is Σ_rows g·aᵀ. Only
// the first `samples` images of a tapped pass are used. Gradient rows arrive
// during backward, through a hook on the layer's output.
//
// Covered: linear layers, and convolutions with groups = 1 and explicit zero
// padding (others are passed over).
//
// Threading: as LayerTap; the sink is called on the forward's thread and on
// the thread that runs backward.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>

#include "bigbatch/models/layer_tap.h"

namespace bigbatch {

struct LayerRowsSink {
  // Whether to tap the layer that owns `weight` (null: every layer).
  std::function<bool(const torch::Tensor& weight)> wants;
  std::function<void(const torch::Tensor& weight, const torch::Tensor& rows)> inputs;
  std::function<void(const torch::Tensor& weight, const torch::Tensor& rows)> outputGradients;
};

class LayerRowsTap : public LayerTap {
 public:
  LayerRowsTap(LayerRowsSink sink, int64_t samples);

  void conv(const torch::nn::Conv2dImpl& conv, const torch::Tensor& input,
            const torch::Tensor& output) override;
  void linear(const torch::nn::LinearImpl& linear, const torch::Tensor& input,
              const torch::Tensor& output) override;

 private:
  void hookOutput(const torch::Tensor& weight, const torch::Tensor& output, int64_t n);

  LayerRowsSink sink_;
  int64_t samples_;
};

}  // namespace bigbatch
