// The fused BatchNorm(+add)+ReLU where the build has no cuDNN kernels (the
// CPU build; the CUDA variant without cuDNN's headers): nothing fuses, the
// models run their unfused layers (fused_batch_norm.h).
#include "bigbatch/models/fused_batch_norm.h"

namespace bigbatch {

bool fusedBatchNormAvailable() { return false; }

torch::Tensor batchNormRelu(torch::nn::BatchNorm2dImpl&, const torch::Tensor&,
                            const torch::Tensor&) {
  return {};
}

int64_t fusedBatchNormCases() { return 0; }

}  // namespace bigbatch
