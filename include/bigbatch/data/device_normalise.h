// The last step of a uint8 batch (PipelineOptions::uint8Batches), where it
// is used: each image mirrored left-right when its flip is set, then
// normalised per channel (x * scale[c] + shift[c], the input pipeline's own
// factors: image_augment.h's Normalisation) and cast to the compute dtype —
// so a GPU run sends 8-bit pixels over the bus (4x fewer bytes than float)
// and does this on the device, on the device feed's copy stream (the form
// of NVIDIA's DALI-free ResNet-50 loader: DeepLearningExamples'
// PrefetchedWrapper). The same ATen ops on CPU tensors give the float
// pipeline's batch: exactly for whole images, within the rounding of the
// resized pixels to 8 bits for crops (tests/data/device_normalise_test.cpp).
//
// Pure functions of their arguments; queued on the caller's current stream.
#pragma once

#include <torch/torch.h>

#include "bigbatch/data/image_augment.h"

namespace bigbatch {

// The per-channel factors as [1, C, 1, 1] float tensors on one device.
struct DeviceNormalisation {
  torch::Tensor scale, shift;
  bool defined() const { return scale.defined(); }
};
DeviceNormalisation deviceNormalisation(const Normalisation& n, const torch::Device& device);

// pixels: uint8 [B, C, H, W] (any strides; channels-last stays
// channels-last); flips: uint8 [B] on the same device, 1 = mirror. Returns
// the normalised batch in `dtype`, in the pixels' memory format. Throws
// InvalidArgument on a shape or dtype that does not fit.
torch::Tensor normaliseOnDevice(const torch::Tensor& pixels, const torch::Tensor& flips,
                                const DeviceNormalisation& n, torch::ScalarType dtype);

}  // namespace bigbatch
