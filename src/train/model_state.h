// Moving a model's state in and out of checkpoints, and finding what broke
// when a gradient is not finite. Internal to src/train; call from the thread
// that owns the model.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "bigbatch/ckpt/checkpoint.h"

namespace bigbatch::train_detail {

// Copies named tensors into the model's parameters (all of them, when
// `params` is non-empty) and buffers; InvalidArgument naming any mismatch.
void restoreModel(torch::nn::Module& model, const NamedTensors& params,
                  const NamedTensors& buffers, const std::string& origin);
// Detached copies, in order.
NamedTensors namedTensors(const torch::OrderedDict<std::string, torch::Tensor>& dict);
// This rank's part of a checkpoint — its BatchNorm buffers, CPU RNG state
// and gradient codec state (PowerSGD's error memory) — as bytes to gather
// on rank 0; rank 0 appends every rank's part (index = rank) to the
// checkpoint's rankBuffers, rankRng and rankCodec (left empty when no rank
// has codec state).
std::string packRankState(torch::nn::Module& model, const NamedTensors& codecState);
void unpackRankStates(const std::vector<std::string>& parts, Checkpoint& k);
// Copies of the model's floating-point buffers (BatchNorm running
// statistics), in order, and their restore into the same model.
std::vector<torch::Tensor> floatBuffers(torch::nn::Module& model);
void restoreFloatBuffers(torch::nn::Module& model, const std::vector<torch::Tensor>& saved);
// The first parameter whose gradient holds an inf or NaN ("?" if none).
std::string firstNonFiniteGradient(torch::nn::Module& model);

}  // namespace bigbatch::train_detail
