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

namespace {

void* streamOf(const torch::Device& device) {
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
}

}  // namespace

DeviceStep::DeviceStep() : kernels_(std::make_unique<FusedCudaStep>()) {}
DeviceStep::~DeviceStep() = default;

bool DeviceStep::available() { return true; }

FusedOutcome DeviceStep::run(const std::vector<FusedTensor>& tensors, const FusedHyper& h,
                             const torch::Device& device) {
  const c10::cuda::CUDAGuard onDevice(device);
  try {
    return kernels_->run(tensors, h, streamOf(device));
  } catch (const std::runtime_error& e) {
    BIGBATCH_THROW(Error, "{} on {}", e.what(), device.str());
  }
}

void DeviceStep::attachLossScale(const LossScaleRule& rule, const LossScalerState& state,
                                 const torch::Device& device) {
  const c10::cuda::CUDAGuard onDevice(device);
  try {
    kernels_->attachLossScale(rule, state, streamOf(device));
  } catch (const std::runtime_error& e) {
    BIGBATCH_THROW(Error, "{} on {}", e.what(), device.str());
  }
  scaleAttached_ = true;
}

void DeviceStep::prepare(const std::vector<FusedTensor>& tensors, const FusedStepScalars& scalars,
                         const torch::Device& device) {
  const c10::cuda::CUDAGuard onDevice(device);
  try {
    kernels_->setScalars(scalars, streamOf(device));
    kernels_->prepare(tensors, streamOf(device));
  } catch (const std::runtime_error& e) {
    BIGBATCH_THROW(Error, "{} on {}", e.what(), device.str());
  }
}

void DeviceStep::launch(const FusedHyper& h, const torch::Device& device) {
  const c10::cuda::CUDAGuard onDevice(device);
  try {
    kernels_->launch(h, streamOf(device));
  } catch (const std::runtime_error& e) {
    BIGBATCH_THROW(Error, "{} on {}", e.what(), device.str());
  }
}

void DeviceStep::markLaunched(const torch::Device& device) {
  const c10::cuda::CUDAGuard onDevice(device);
  try {
    kernels_->markLaunched(streamOf(device));
  } catch (const std::runtime_error& e) {
    BIGBATCH_THROW(Error, "{} on {}", e.what(), device.str());
  }
}

bool DeviceStep::pending() const { return kernels_->pending(); }

DeferredOutcome DeviceStep::settle() {
  FusedSettled s;
  try {
    s = kernels_->settle();
  } catch (const std::runtime_error& e) {
    BIGBATCH_THROW(Error, "{}", e.what());
  }
  return {s.applied, s.gradNormSq, s.scaleBefore, s.scaleAfter};
}

torch::Tensor DeviceStep::lossScale(const torch::Device& device) {
  if (!scaleAttached_) return {};
  return torch::from_blob(kernels_->lossScaleOnDevice(), {},
                          torch::TensorOptions(torch::kDouble).device(device));
}

torch::Tensor DeviceStep::skipped(const torch::Device& device) {
  int32_t* flag = kernels_->skippedOnDevice();
  BIGBATCH_CHECK(flag != nullptr, Error, "the device step's skip flag before its first step");
  return torch::from_blob(flag, {}, torch::TensorOptions(torch::kInt).device(device));
}

#else

class FusedCudaStep {};  // never made in the CPU build

namespace {

[[noreturn]] void needsCuda(const torch::Device& device) {
  BIGBATCH_THROW(InvalidArgument,
                 "the fused optimizer step on {} needs the CUDA build of bigbatch (docs/GPU.md)",
                 device.str());
}

}  // namespace

DeviceStep::DeviceStep() = default;
DeviceStep::~DeviceStep() = default;

bool DeviceStep::available() { return false; }

FusedOutcome DeviceStep::run(const std::vector<FusedTensor>&, const FusedHyper&,
                             const torch::Device& device) {
  needsCuda(device);
}
void DeviceStep::attachLossScale(const LossScaleRule&, const LossScalerState&,
                                 const torch::Device& device) {
  needsCuda(device);
}
void DeviceStep::prepare(const std::vector<FusedTensor>&, const FusedStepScalars&,
                         const torch::Device& device) {
  needsCuda(device);
}
void DeviceStep::launch(const FusedHyper&, const torch::Device& device) { needsCuda(device); }
void DeviceStep::markLaunched(const torch::Device& device) { needsCuda(device); }
bool DeviceStep::pending() const { return false; }
DeferredOutcome DeviceStep::settle() { return {}; }
torch::Tensor DeviceStep::lossScale(const torch::Device& device) { needsCuda(device); }
torch::Tensor DeviceStep::skipped(const torch::Device& device) { needsCuda(device); }

#endif

}  // namespace bigbatch::optim_detail
