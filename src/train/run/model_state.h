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
// A frozen parameter (`frozen`: held as a buffer, saved once with the
// parameters) is taken from `params`, or from `buffers` in a checkpoint
// written before it was saved there.
void restoreModel(torch::nn::Module& model, const NamedTensors& params,
                  const NamedTensors& buffers, const std::string& origin,
                  const std::vector<std::string>& frozen = {});
// The frozen parameters' tensors (copies), in `frozen`'s order.
NamedTensors frozenTensors(torch::nn::Module& model, const std::vector<std::string>& frozen);
// The tensors detached, in order — the live storage, not copies: a
// checkpoint written at once needs none, and one written in the background
// is copied once by snapshotCheckpoint (ckpt/background_writer.h), on the
// device where the tensors are.
NamedTensors namedTensors(const torch::OrderedDict<std::string, torch::Tensor>& dict);
// This rank's part of a checkpoint — its BatchNorm buffers, CPU RNG state
// and gradient codec state (PowerSGD's error memory) — as bytes to gather
// on rank 0; rank 0 appends every rank's part (index = rank) to the
// checkpoint's rankBuffers, rankRng and rankCodec (left empty when no rank
// has codec state).
// `frozen`: buffers that are frozen parameters — not per rank, left out.
std::string packRankState(torch::nn::Module& model, const NamedTensors& codecState,
                          const std::vector<std::string>& frozen = {});
void unpackRankStates(const std::vector<std::string>& parts, Checkpoint& k);
// Copies of the model's floating-point buffers (BatchNorm running
// statistics), in order, and their restore into the same model.
std::vector<torch::Tensor> floatBuffers(torch::nn::Module& model);
void restoreFloatBuffers(torch::nn::Module& model, const std::vector<torch::Tensor>& saved);
// A codec state for a rank of a world of `worldSize` from every old rank's
// (`ranks`, a checkpoint's rankCodec): rank 0's shared entries (PowerSGD's
// Q and step count), and each error-memory entry ("/error/" in its name)
// as the sum over the old ranks divided by `worldSize` — so the new ranks'
// error memories add up to the old ones'.
NamedTensors carriedCodecState(const std::vector<NamedTensors>& ranks, int worldSize);
// The first parameter whose gradient holds an inf or NaN ("?" if none).
std::string firstNonFiniteGradient(torch::nn::Module& model);

}  // namespace bigbatch::train_detail
