#include "bigbatch/data/device_normalise.h"

#include "bigbatch/common/error.h"

namespace bigbatch {

DeviceNormalisation deviceNormalisation(const Normalisation& n, const torch::Device& device) {
  const auto c = static_cast<int64_t>(n.scale.size());
  BIGBATCH_REQUIRE(c > 0 && n.shift.size() == n.scale.size(), InvalidArgument,
                   "normalisation: {} scales and {} shifts", n.scale.size(), n.shift.size());
  const auto onDevice = [&](const std::vector<float>& v) {
    return torch::tensor(v, torch::kFloat).view({1, c, 1, 1}).to(device);
  };
  return {onDevice(n.scale), onDevice(n.shift)};
}

torch::Tensor normaliseOnDevice(const torch::Tensor& pixels, const torch::Tensor& flips,
                                const DeviceNormalisation& n, torch::ScalarType dtype) {
  BIGBATCH_REQUIRE(pixels.dim() == 4 && pixels.scalar_type() == torch::kUInt8, InvalidArgument,
                   "normaliseOnDevice: pixels must be uint8 [B, C, H, W] (got {} {})",
                   std::string(pixels.dtype().name()), c10::str(pixels.sizes()));
  BIGBATCH_REQUIRE(n.defined() && n.scale.size(1) == pixels.size(1), InvalidArgument,
                   "normaliseOnDevice: {} channel factors for {} channels",
                   n.defined() ? n.scale.size(1) : 0, pixels.size(1));
  BIGBATCH_REQUIRE(flips.defined() && flips.dim() == 1 && flips.size(0) == pixels.size(0),
                   InvalidArgument, "normaliseOnDevice: {} flips for {} images",
                   flips.defined() ? flips.numel() : 0, pixels.size(0));
  torch::NoGradGuard noGrad;
  const auto format = pixels.suggest_memory_format();
  // Mirrored where asked — decided on the device, so nothing here waits
  // for it. The flip is a permutation of bytes: exact.
  const torch::Tensor mirror = flips.to(torch::kBool).view({-1, 1, 1, 1});
  const torch::Tensor x = torch::where(mirror, pixels.flip({3}), pixels);
  // x * scale + shift in float, a multiply then an add, each rounded: the
  // float pipeline's arithmetic (image_augment.cpp), then the compute dtype.
  torch::Tensor y = x.to(torch::kFloat).mul_(n.scale).add_(n.shift);
  if (dtype != torch::kFloat) y = y.to(dtype);
  return y.contiguous(format);
}

}  // namespace bigbatch
