// RunDevice: where this rank computes (run.device), resolved once at the
// start of a run, before its run directory exists, so a refusal loses
// nothing.
//
// "cpu": the CPU (both builds). "cuda": the CUDA build only; the ranks of a
// host take its GPUs round-robin (local rank r uses GPU r mod G). More ranks
// than GPUs on a host is allowed — the ranks that share a GPU exchange
// gradients through pinned host memory (ddp/device_staging.h) — and said in
// the description.
//
// Internal to src/train; called on the training thread.
#pragma once

#include <torch/torch.h>

#include <string>

namespace bigbatch::train_detail {

struct RunDevice {
  torch::Device device{torch::kCPU};
  int gpusOnHost = 0;       // CUDA: the GPUs this process sees
  int ranksPerGpu = 1;      // CUDA: ranks of this host on the busiest GPU
  std::string description;  // "cpu", or "cuda:0 (NVIDIA H200, 140 GiB)"
  bool tf32 = true;         // CUDA: fp32 matmuls and convolutions on TF32 tensor cores (amp.tf32)
};

// True when this binary was built for CUDA (BIGBATCH_CUDA=ON).
bool builtWithCuda();

// Throws InvalidArgument naming the fix when this is the CPU build; the
// second also when no GPU is visible to this process.
void checkCudaBuilt();
void checkCudaAvailable();

// Throws InvalidArgument naming the fix: "cuda" on a CPU build, or on a
// machine where no GPU is visible; any other name.
RunDevice resolveRunDevice(const std::string& name, int localRank, int localSize, bool tf32);

// Makes `d` the calling thread's current device (CUDA; a no-op on CPU), so
// the tensors, streams and libraries it creates are on that GPU, and sets
// the process's cuDNN and cuBLAS choices as PyTorch users run them: cuDNN
// benchmarks its convolution algorithms per shape, and fp32 compute uses
// TF32 unless amp.tf32 = false.
void makeCurrent(const RunDevice& d);

}  // namespace bigbatch::train_detail
