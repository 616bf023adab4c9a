// Model weights in and out, in PyTorch's own format: a `.pt` file that
// Python's `torch.load` reads as a dict from PyTorch-style names
// (`conv1.weight`, `bn1.running_mean`, `fc.bias`) to tensors — written with
// torch::pickle_save, so no bigbatch code is needed to use the weights.
//
// Thread-compatible: call from the thread that owns the module.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace bigbatch {

// A tied tensor's second names: (alias, the name the module registers it
// under) — ImageClassifierImpl::tensorAliases().
using TensorAliases = std::vector<std::pair<std::string, std::string>>;

// Every parameter and buffer of `module`, contiguous, on the CPU, and each
// alias as the same tensor (one storage under both names, as PyTorch's
// state_dict() of tied weights). Written to `path` atomically (temporary
// file, fsync, rename): a crash never leaves a half-written file there.
void saveStateDict(torch::nn::Module& module, const std::string& path,
                   const TensorAliases& aliases = {});
// `dict`'s entry for each alias's name, also under the alias.
void addAliases(c10::Dict<std::string, at::Tensor>& dict, const TensorAliases& aliases);

// Copies the tensors of `path` into `module`'s parameters and buffers.
// `path` is a state dict (torch::pickle_save / bigbatch's model.pt) or a
// TorchScript module file (torch.jit.save), whose named parameters and
// buffers are read (ckpt/torchscript_file.h).
// Every name must match and every shape agree, both ways (a missing or extra
// tensor is an error naming it); dtypes are converted. Throws InvalidArgument
// or IoError with the file, the name and the fix. An alias's entry, where
// the file has one, is the module's too (a tied tensor: its value is the
// registered name's).
void loadStateDict(torch::nn::Module& module, const std::string& path,
                   const TensorAliases& aliases = {});
// The same for tensors already read; `origin` names them in messages.
void loadStateDict(torch::nn::Module& module, const c10::Dict<std::string, at::Tensor>& dict,
                   const std::string& origin, const TensorAliases& aliases = {});

// A tensor's shape as "[2, 7]", for messages that name a mismatch.
std::string shapeText(const at::Tensor& t);

// The raw dict of a state-dict or TorchScript file (for `bigbatch export`).
c10::Dict<std::string, at::Tensor> readStateDict(const std::string& path);
void writeStateDict(const c10::Dict<std::string, at::Tensor>& dict, const std::string& path);

}  // namespace bigbatch
