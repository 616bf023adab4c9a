#include "device_step.h"

#include <stdexcept>

#include "bigbatch/common/error.h"

#ifdef BIGBATCH_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/fused_step_cuda.h"
#endif

namespace bigbatch::optim_detail {

#ifdef BIGBATCH_WITH_CUDA

DeviceStep::DeviceStep() : kernels_(std::make_unique<FusedCudaStep>()) {}
DeviceStep::~DeviceStep() = default;

bool DeviceStep::available() { return true; }

FusedOutcome DeviceStep::run(const std::vector<FusedTensor>& tensors, const FusedHyper& h,
                             const torch::Device& device) {
  const c10::cuda::CUDAGuard onDevice(device);
  try {
    return kernels_->run(tensors, h, c10::cuda::getCurrentCUDAStream(device.index()).stream());
  } catch (const std::runtime_error& e) {
    BIGBATCH_THROW(Error, "{} on {}", e.what(), device.str());
  }
}

#else

class FusedCudaStep {};  // never made in the CPU build

DeviceStep::DeviceStep() = default;
DeviceStep::~DeviceStep() = default;

bool DeviceStep::available() { return false; }

FusedOutcome DeviceStep::run(const std::vector<FusedTensor>&, const FusedHyper&,
                             const torch::Device& device) {
  BIGBATCH_THROW(InvalidArgument,
                 "the fused optimizer step on {} needs the CUDA build of bigbatch (docs/GPU.md)",
                 device.str());
}

#endif

}  // namespace bigbatch::optim_detail
