// PowerSGD's device codec on a stream of its own (CUDA build, label
// "cuda"): its state is made on the compute stream (construction,
// loadState) and replaced on the exchange's stream (Q, every step). A block
// freed there must not go to the compute stream's next allocation while
// the exchange stream's queued kernels still read it (the caching
// allocator's rule; device_powersgd_codec.h, adoptStateOnCurrentStream).
// The control: the exchange stream held back by a spin, the compute stream
// allocating and overwriting blocks of Q's size at once — a reused block
// shows as a step that differs from the same step run without the spin.
#include <ATen/cuda/Sleep.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include "device_powersgd_codec.h"

namespace bigbatch::ddp_detail {
namespace {

class OneRankDeviceWire : public DeviceWireSum {
 public:
  void sum(const torch::Tensor&) override {}
};

// Three steps of the codec on `stream`; with `contend`, each step's
// exchange waits behind a spin there while the compute stream allocates
// and fills tensors of Q's shape.
std::vector<torch::Tensor> threeSteps(const c10::Stream& stream, bool contend) {
  const torch::Device gpu(torch::kCUDA, 0);
  const std::vector<torch::Tensor> params = {torch::zeros({256, 192}), torch::zeros({256})};
  Bucket bucket;
  bucket.entries = {{0, 0, 256 * 192}, {1, 256 * 192, 256}};
  bucket.numel = 256 * 193;
  PowerSgdOptions o;
  o.rank = 4;
  // Made on the compute stream (current here), as the trainer makes it.
  DevicePowerSgdCodec codec(o, DataType::kFloat32, params, {"w", "b"}, 1, gpu);
  OneRankDeviceWire wire;
  torch::manual_seed(11);
  std::vector<torch::Tensor> out;
  for (int step = 0; step < 3; ++step) {
    torch::Tensor g = torch::randn({bucket.numel}).to(gpu);
    torch::cuda::synchronize();
    {
      const c10::StreamGuard onExchange(stream);
      if (contend) at::cuda::sleep(200'000'000);  // ~0.1 s: the exchange's kernels wait
      codec.exchange(0, bucket, g, wire);
    }
    if (contend) {
      // Blocks of Q's size (192 x 4 floats) and of the error memory's, freed
      // by the exchange, taken on the compute stream and overwritten now —
      // with a finite value: a NaN would be taken for a collapsed Q, which
      // the codec replaces by its first draw, so a reused block filled with
      // NaN could leave the step as it was and the test could not fail
      // (outside review; device_codec_test's
      // DevicePowerSgd.AQOverwrittenWithNanIsInvisibleAFiniteOneIsNot shows
      // that logic on the CPU).
      std::vector<torch::Tensor> junk;
      for (int i = 0; i < 16; ++i)
        junk.push_back(torch::full({192, 4}, 1234.5f, torch::device(gpu)));
    }
    torch::cuda::synchronize();
    out.push_back(g.cpu());
  }
  return out;
}

TEST(DevicePowerSgdCuda, StateMadeOnTheComputeStreamIsNotReusedUnderTheExchangeStream) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device gpu(torch::kCUDA, 0);
  const c10::impl::VirtualGuardImpl impl(gpu.type());
  const c10::Stream stream = impl.getStreamFromGlobalPool(gpu);
  const auto calm = threeSteps(stream, /*contend=*/false);
  const auto contended = threeSteps(stream, /*contend=*/true);
  for (size_t s = 0; s < calm.size(); ++s) {
    EXPECT_TRUE(contended[s].isfinite().all().item<bool>()) << "step " << s;
    EXPECT_TRUE(torch::equal(calm[s], contended[s])) << "step " << s;
  }
}

}  // namespace
}  // namespace bigbatch::ddp_detail
