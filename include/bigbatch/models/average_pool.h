// Adaptive average pooling for the models' heads that stays deterministic
// on a GPU. ATen's adaptive_avg_pool2d backward on CUDA adds into its input
// gradient with atomics, so under run.deterministic (ATen's deterministic
// algorithms as errors) it raises. The same averages as fixed linear maps
// are deterministic there: a mean over (H, W) for a 1 x 1 output, else two
// products with the pooling matrices, out = P_h · x · P_wᵀ, where row i of
// P_h holds 1 / len over input rows [floor(i·H/o), ceil((i+1)·H/o)) —
// adaptive pooling's own windows. Equal to ATen's to float rounding.
//
// Pure functions; thread-safe.
#pragma once

#include <torch/torch.h>

namespace bigbatch {

// ATen's adaptive_avg_pool2d, or the deterministic form when `x` is on a
// GPU and ATen's deterministic algorithms are on.
torch::Tensor adaptiveAvgPool2d(const torch::Tensor& x, int64_t outH, int64_t outW);

// The deterministic form alone (any device), for the check against ATen.
torch::Tensor adaptiveAvgPool2dByMatrices(const torch::Tensor& x, int64_t outH, int64_t outW);

}  // namespace bigbatch
