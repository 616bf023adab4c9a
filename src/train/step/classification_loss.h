// The training loss: cross-entropy with label smoothing (Szegedy et al.
// 2016), summed over the micro-batch, in fp32. ATen's cross_entropy goes
// through nll_loss, whose CUDA forward adds with atomics and raises under
// run.deterministic (ATen's deterministic algorithms as errors); there the
// same loss is taken as −Σ log_softmax(logits) · target, with the smoothed
// one-hot target built by comparison — no atomics. Equal to ATen's to float
// rounding.
//
// Internal to src/train. Pure functions; thread-safe.
#pragma once

#include <torch/torch.h>

namespace bigbatch::train_detail {

// ATen's cross_entropy (reduction sum), or the deterministic form when
// `logits` is on a GPU and ATen's deterministic algorithms are on.
torch::Tensor crossEntropySum(const torch::Tensor& logits, const torch::Tensor& labels,
                              double labelSmoothing);

// The deterministic form alone (any device), for the check against ATen.
torch::Tensor crossEntropySumBySmoothedTargets(const torch::Tensor& logits,
                                               const torch::Tensor& labels, double labelSmoothing);

}  // namespace bigbatch::train_detail
