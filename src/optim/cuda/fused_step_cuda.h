// FusedCudaStep: fused_step.h's two launches on a CUDA device. Owns the
// device copies of the chunk table (uploaded when the tensors' sizes
// change) and of the tensor table (uploaded every step: the lrs change),
// the partial sums and the outcome; one object per optimizer.
//
// Plain C++ interface (no CUDA or torch header), so code compiled by g++
// against either libtorch can hold one. Threading: one thread calls run()
// at a time, on the device made current for it.
#pragma once

#include <memory>
#include <vector>

#include "../fused_step.h"

namespace bigbatch::optim_detail {

class FusedCudaStep {
 public:
  FusedCudaStep();
  ~FusedCudaStep();
  FusedCudaStep(const FusedCudaStep&) = delete;
  FusedCudaStep& operator=(const FusedCudaStep&) = delete;

  // One step over `tensors` (device pointers), enqueued on `stream` (a
  // cudaStream_t); waits for the 16-byte outcome, the one host sync of the
  // step. Throws std::runtime_error naming the CUDA error.
  FusedOutcome run(const std::vector<FusedTensor>& tensors, const FusedHyper& h, void* stream);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace bigbatch::optim_detail
