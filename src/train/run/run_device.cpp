#include "run/run_device.h"

#include <fmt/format.h>

#include "bigbatch/common/error.h"

#ifdef BIGBATCH_WITH_CUDA
#include <ATen/Context.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <mutex>
#endif

namespace bigbatch::train_detail {

bool builtWithCuda() {
#ifdef BIGBATCH_WITH_CUDA
  return true;
#else
  return false;
#endif
}

void checkCudaBuilt() {
  BIGBATCH_REQUIRE(builtWithCuda(), InvalidArgument,
                   "run.device = \"cuda\", but this bigbatch is the CPU build (Debian's libtorch "
                   "has no CUDA). Build the CUDA variant with scripts/build-cuda (docs/GPU.md) "
                   "and run build-cuda/apps/bigbatch, or set run.device = \"cpu\"");
}

void checkCudaAvailable() {
  checkCudaBuilt();
  BIGBATCH_REQUIRE(torch::cuda::is_available(), InvalidArgument,
                   "run.device = \"cuda\", but libtorch sees no GPU (the CUDA runtime reports "
                   "{} device(s)): check nvidia-smi and CUDA_VISIBLE_DEVICES, or set "
                   "run.device = \"cpu\"",
                   torch::cuda::device_count());
}

RunDevice resolveRunDevice(const std::string& name, int slot, int localSize,
                           DeviceChoices choices) {
  RunDevice d;
  d.choices = choices;
  if (name == "cpu") {
    d.description = "cpu";
    return d;
  }
  BIGBATCH_REQUIRE(name == "cuda", InvalidArgument,
                   "run.device = \"{}\" is not a device; use \"cpu\" or \"cuda\"", name);
  checkCudaAvailable();
#ifdef BIGBATCH_WITH_CUDA
  d.gpusOnHost = static_cast<int>(torch::cuda::device_count());
  const int index = slot % d.gpusOnHost;
  d.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  d.ranksPerGpu = (localSize + d.gpusOnHost - 1) / d.gpusOnHost;
  cudaDeviceProp prop{};
  const bool named = cudaGetDeviceProperties(&prop, index) == cudaSuccess;
  d.description = fmt::format("cuda:{} ({}, {:.0f} GiB){}", index, named ? prop.name : "?",
                              named ? static_cast<double>(prop.totalGlobalMem) / (1 << 30) : 0.0,
                              d.ranksPerGpu > 1
                                  ? fmt::format(", shared by {} ranks of this host", d.ranksPerGpu)
                                  : std::string());
#endif
  return d;
}

void makeCurrent(const RunDevice& d) {
#ifdef BIGBATCH_WITH_CUDA
  if (!d.device.is_cuda()) return;
  c10::cuda::set_device(d.device.index());
  auto& context = at::globalContext();
  context.setAllowTF32CuDNN(d.choices.tf32);
  context.setAllowTF32CuBLAS(d.choices.tf32);
  if (d.choices.deterministic) {
    // Before the first cuBLAS handle, which reads it; once per process (the
    // in-process ranks of the tests call this from several threads).
    static std::once_flag workspace;
    std::call_once(workspace, [] { setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0); });
    context.setBenchmarkCuDNN(false);
    context.setDeterministicCuDNN(true);
    // As errors: an op without a deterministic kernel raises, naming itself,
    // instead of quietly breaking the promise of the same weights. The
    // models' pooling and the loss take deterministic forms in this mode
    // (models/average_pool.h, classification_loss.h).
    context.setDeterministicAlgorithms(true, /*warn_only=*/false);
  } else {  // the process's settings are global: an earlier run's are undone
    context.setBenchmarkCuDNN(true);
    context.setDeterministicCuDNN(false);
    context.setDeterministicAlgorithms(false, /*warn_only=*/false);
  }
#endif
}

}  // namespace bigbatch::train_detail
