// DeviceStep: the optimizer step for parameters in CUDA memory — the fused
// kernels of fused_step.h on the calling thread's current CUDA stream. The
// CUDA build only; in the CPU build available() is false and every call
// throws, naming the CUDA build.
//
// run() waits for the step's outcome. The deferred form (issue 55; the
// kernels' side is cuda/fused_step_cuda.h) does not: prepare() writes the
// step's values into device memory and uploads the tensor table if it
// changed, launch() queues the kernels (a CUDA graph may capture it),
// markLaunched() records the event that settle() waits for, normally one
// step later. With a loss scale attached the kernels unscale by it and
// update it on the device.
//
// Internal to src/optim. Threading: the optimizer's thread (one at a time).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "bigbatch/amp/loss_scale_rule.h"
#include "fused_step.h"

namespace bigbatch::optim_detail {

class FusedCudaStep;

// A deferred step's outcome (see settle()).
struct DeferredOutcome {
  bool applied = true;
  double gradNormSq = 0;
  double scaleBefore = 1;
  LossScalerState scaleAfter;
};

class DeviceStep {
 public:
  DeviceStep();
  ~DeviceStep();
  static bool available();
  FusedOutcome run(const std::vector<FusedTensor>& tensors, const FusedHyper& h,
                   const torch::Device& device);

  void attachLossScale(const LossScaleRule& rule, const LossScalerState& state,
                       const torch::Device& device);
  // `tensors` hold each tensor's lr and decay multipliers; `scalars` the
  // step's lr, decay scale, momentum, bias corrections.
  void prepare(const std::vector<FusedTensor>& tensors, const FusedStepScalars& scalars,
               const torch::Device& device);
  void launch(const FusedHyper& h, const torch::Device& device);
  void markLaunched(const torch::Device& device);
  bool pending() const;
  DeferredOutcome settle();
  // 0-dim views of device memory the step reads and writes: the loss scale
  // (double; undefined until attachLossScale) and the last step's skip
  // flag (int32, 1 = skipped).
  torch::Tensor lossScale(const torch::Device& device);
  torch::Tensor skipped(const torch::Device& device);

 private:
  std::unique_ptr<FusedCudaStep> kernels_;
  bool scaleAttached_ = false;
};

}  // namespace bigbatch::optim_detail
