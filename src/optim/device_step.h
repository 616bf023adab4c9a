// DeviceStep: the optimizer step for parameters in CUDA memory — the fused
// kernels of fused_step.h on the calling thread's current CUDA stream. The
// CUDA build only; in the CPU build available() is false and run() throws.
//
// Internal to src/optim. Threading: the optimizer's thread (one at a time).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "fused_step.h"

namespace bigbatch::optim_detail {

class FusedCudaStep;

class DeviceStep {
 public:
  DeviceStep();
  ~DeviceStep();
  static bool available();
  FusedOutcome run(const std::vector<FusedTensor>& tensors, const FusedHyper& h,
                   const torch::Device& device);

 private:
  std::unique_ptr<FusedCudaStep> kernels_;
};

}  // namespace bigbatch::optim_detail
