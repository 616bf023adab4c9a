// Model weights in and out, in PyTorch's own format: a `.pt` file that
// Python's `torch.load` reads as a dict from PyTorch-style names
// (`conv1.weight`, `bn1.running_mean`, `fc.bias`) to tensors — written with
// torch::pickle_save, so no bigbatch code is needed to use the weights.
//
// Thread-compatible: call from the thread that owns the module.
#pragma once

#include <torch/torch.h>

#include <string>

namespace bigbatch {

// Every parameter and buffer of `module`, contiguous, on the CPU. Written to
// `path` atomically (temporary file, fsync, rename): a crash never leaves a
// half-written file under that name.
void saveStateDict(torch::nn::Module& module, const std::string& path);

// Copies the tensors of `path` into `module`'s parameters and buffers.
// `path` is a state dict (torch::pickle_save / bigbatch's model.pt) or a
// TorchScript module file (torch.jit.save), whose named parameters and
// buffers are read (ckpt/torchscript_file.h).
// Every name must match and every shape agree, both ways (a missing or extra
// tensor is an error naming it); dtypes are converted. Throws InvalidArgument
// or IoError with the file, the name and the fix.
void loadStateDict(torch::nn::Module& module, const std::string& path);
// The same for tensors already read; `origin` names them in messages.
void loadStateDict(torch::nn::Module& module, const c10::Dict<std::string, at::Tensor>& dict,
                   const std::string& origin);

// A tensor's shape as "[2, 7]", for messages that name a mismatch.
std::string shapeText(const at::Tensor& t);

// The raw dict of a state-dict or TorchScript file (for `bigbatch export`).
c10::Dict<std::string, at::Tensor> readStateDict(const std::string& path);
void writeStateDict(const c10::Dict<std::string, at::Tensor>& dict, const std::string& path);

}  // namespace bigbatch
