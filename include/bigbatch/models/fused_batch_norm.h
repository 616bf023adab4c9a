// BatchNorm+ReLU and BatchNorm+add+ReLU in one kernel each, forward and
// backward — cuDNN's cudnnBatchNormalizationForwardTrainingEx /
// BackwardEx with CUDNN_BATCHNORM_OPS_BN_ACTIVATION and
// BN_ADD_ACTIVATION on NHWC fp16 tensors (the fused layers of NVIDIA's
// MLPerf ResNet-50 and Apex's groupbn) — as a custom autograd function:
// relu(bn(x) + z) writes y once and reads it back with a ReLU mask in
// backward, instead of a BatchNorm output, an add and a ReLU each written
// and read. The running statistics are updated as BatchNorm2d's forward
// updates them (momentum, num_batches_tracked).
//
// Only the CUDA variant has it (src/models/cuda/fused_batch_norm.cpp,
// linked with cuDNN); elsewhere fusedBatchNormAvailable() is false and
// batchNormRelu() gives nothing. Threading: the thread running the model;
// queued on its current CUDA stream (capturable by a CUDA graph).
#pragma once

#include <torch/torch.h>

namespace bigbatch {

// Whether this build has the fused kernels (the CUDA variant with cuDNN).
bool fusedBatchNormAvailable();

// relu(bn(x) + z) (z undefined: relu(bn(x))) for `bn` in training mode, in
// one cuDNN call; x (and z) a CUDA half [N, C, H, W] tensor, C a multiple
// of 4, channels-last; bn affine with running statistics and a momentum.
// Returns an undefined tensor where it cannot: another device, dtype
// (bfloat16 too: cuDNN's fused ops take half only) or layout, bn in
// evaluation mode, or a shape and eps cuDNN does not fuse — asked once per
// shape, eps and add by a forward and a backward call at that shape. The
// caller then runs the unfused layers.
torch::Tensor batchNormRelu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                            const torch::Tensor& z = torch::Tensor());

// How many cases (shape, eps, with or without the add) cuDNN has been asked
// about in this process and fuses: what a test reads to know the fused path
// ran (0 off the CUDA build).
int64_t fusedBatchNormCases();

}  // namespace bigbatch
