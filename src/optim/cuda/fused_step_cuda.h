// FusedCudaStep: fused_step.h's two launches on a CUDA device. Owns the
// device copies of the chunk table (uploaded when the tensors' sizes
// change) and of the tensor table, the partial sums, and the step's state in
// device memory; one object per optimizer.
//
// Two ways to run a step:
//  - run(): the whole step, waiting for its 16-byte outcome (the tests, and
//    any caller that needs the outcome at once);
//  - the deferred form, which never waits inside a step (issue 55): the
//    per-step values (learning rate, momentum, LAMB's bias corrections)
//    written into device memory by setScalars(); prepare() uploads the
//    tensor table when it changed; launch() queues the two kernels and the
//    outcome's copy into pinned memory — nothing else, so a CUDA graph can
//    capture it, and the captured step reads the new values every replay;
//    markLaunched() records an event after it, and settle() waits for that
//    event and reads the outcome, normally one step later when it is long
//    done. With a loss scale attached, the step reads 1/scale from device
//    memory and its last block updates the scale there by the host's own
//    rule (amp/loss_scale_rule.h): a non-finite step skips itself and backs
//    the scale off without the host.
//
// Plain C++ interface (no CUDA or torch header), so code compiled by g++
// against either libtorch can hold one. Threading: one thread calls it at a
// time, on the device made current for it.
#pragma once

#include <memory>
#include <vector>

#include "../fused_step.h"
#include "bigbatch/amp/loss_scale_rule.h"

namespace bigbatch::optim_detail {

// A deferred step's outcome, as settle() reads it.
struct FusedSettled {
  bool applied = true;
  double gradNormSq = 0;
  double scaleBefore = 1;     // the loss scale the step unscaled by (attached only)
  LossScalerState scaleAfter;  // the scale state after the step's update (attached only)
};

class FusedCudaStep {
 public:
  FusedCudaStep();
  ~FusedCudaStep();
  FusedCudaStep(const FusedCudaStep&) = delete;
  FusedCudaStep& operator=(const FusedCudaStep&) = delete;

  // One step over `tensors` (device pointers), enqueued on `stream` (a
  // cudaStream_t); waits for the 16-byte outcome. Throws std::runtime_error
  // naming the CUDA error.
  FusedOutcome run(const std::vector<FusedTensor>& tensors, const FusedHyper& h, void* stream);

  // The deferred form (see the header). attachLossScale copies `state`
  // into device memory (once, before the first deferred step).
  void attachLossScale(const LossScaleRule& rule, const LossScalerState& state, void* stream);
  void setScalars(const FusedStepScalars& s, void* stream);
  // Uploads the table when it differs from the last one uploaded (then it
  // first waits for the previous step's event: the pinned source is
  // rewritten). `tensors` hold lr and decay multipliers (see above).
  void prepare(const std::vector<FusedTensor>& tensors, void* stream);
  // Capturable: the two kernels and the outcome's copy to pinned memory.
  void launch(const FusedHyper& h, void* stream);
  void markLaunched(void* stream);
  bool pending() const;
  // Waits for the last launched step (its event) and reads its outcome.
  FusedSettled settle();

  // Device memory the training step reads: the loss scale (a double) and
  // the last step's skip flag (an int32: 1 = skipped). Null before the
  // first prepare().
  double* lossScaleOnDevice();
  int32_t* skippedOnDevice();

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace bigbatch::optim_detail
