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

// How a GPU computes (ignored on the CPU).
struct DeviceChoices {
  bool tf32 = true;            // fp32 matmuls and convolutions on TF32 tensor cores (amp.tf32)
  bool deterministic = false;  // the same run twice, the same weights (run.deterministic)
};

struct RunDevice {
  torch::Device device{torch::kCPU};
  int gpusOnHost = 0;       // CUDA: the GPUs this process sees
  int ranksPerGpu = 1;      // CUDA: ranks of this host on the busiest GPU
  std::string description;  // "cpu", or "cuda:0 (NVIDIA H200, 140 GiB)"
  DeviceChoices choices;
};

// True when this binary was built for CUDA (BIGBATCH_CUDA=ON).
bool builtWithCuda();

// Throws InvalidArgument naming the fix when this is the CPU build; the
// second also when no GPU is visible to this process.
void checkCudaBuilt();
void checkCudaAvailable();

// The device of the rank in `slot` of its host (common/launch_slot.h):
// GPU slot mod the host's GPUs. Throws InvalidArgument naming the fix:
// "cuda" on a CPU build, or on a machine where no GPU is visible; any
// other name.
RunDevice resolveRunDevice(const std::string& name, int slot, int localSize,
                           DeviceChoices choices);

// Makes `d` the calling thread's current device (CUDA; a no-op on CPU), so
// the tensors, streams and libraries it creates are on that GPU, and sets
// the process's cuDNN and cuBLAS choices as PyTorch users run them: cuDNN
// benchmarks its convolution algorithms per shape, and fp32 compute uses
// TF32 unless amp.tf32 = false. With run.deterministic, what PyTorch's
// reproducibility notes ask for instead: deterministic cuDNN algorithms
// without benchmarking (a benchmark may pick another algorithm, with other
// rounding, in another run), CUBLAS_WORKSPACE_CONFIG=:4096:8 unless the
// user set it (cuBLAS's split reductions are otherwise not reproducible,
// CUDA >= 10.2), and ATen's deterministic algorithms, warning where an op
// has none.
void makeCurrent(const RunDevice& d);

}  // namespace bigbatch::train_detail
