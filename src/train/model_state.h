// Moving a model's state in and out of checkpoints, and finding what broke
// when a gradient is not finite. Internal to src/train; call from the thread
// that owns the model.
#pragma once

#include <torch/torch.h>

#include <string>

#include "bigbatch/ckpt/checkpoint.h"

namespace bigbatch::train_detail {

// Copies named tensors into the model's parameters (all of them, when
// `params` is non-empty) and buffers; InvalidArgument naming any mismatch.
void restoreModel(torch::nn::Module& model, const NamedTensors& params,
                  const NamedTensors& buffers, const std::string& origin);
// Detached copies, in order.
NamedTensors namedTensors(const torch::OrderedDict<std::string, torch::Tensor>& dict);
// The first parameter whose gradient holds an inf or NaN ("?" if none).
std::string firstNonFiniteGradient(torch::nn::Module& model);

}  // namespace bigbatch::train_detail
