// The DDP's NCCL path on a GPU (CUDA build with NCCL, label "cuda"): the
// buckets handed to NcclExchange as backward would — events on the compute
// stream, the sum on NCCL's stream, the compute stream made to wait — come
// back on one rank as the host exchange would leave them: fp32 unchanged,
// fp16 and bf16 rounded exactly as packFloats/unpackFloats round (the
// host path's wire), every bucket, also when the compute stream is still
// writing a bucket when it is handed over; and PowerSGD's device codec on
// NCCL's stream leaves what the same codec leaves on the CPU, to float
// rounding (cuBLAS against ATen's CPU products), and every step finite.
// One rank only: NCCL refuses two ranks on one GPU.
#include "nccl_exchange.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/common/torch_compat.h"
#include "device_powersgd_codec.h"

namespace bigbatch::ddp_detail {
namespace {

std::vector<Bucket> oneEntryEach(const std::vector<torch::Tensor>& buckets) {
  std::vector<Bucket> layout;
  for (size_t b = 0; b < buckets.size(); ++b) {
    Bucket bucket;
    bucket.entries = {{b, 0, buckets[b].numel()}};
    bucket.numel = buckets[b].numel();
    layout.push_back(bucket);
  }
  return layout;
}

class OneRankDeviceWire : public DeviceWireSum {
 public:
  void sum(const torch::Tensor&) override {}
};

TEST(NcclExchange, OneRankLeavesWhatTheHostWireLeaves) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device gpu(torch::kCUDA, 0);
  const c10::impl::VirtualGuardImpl impl(gpu.type());
  const c10::Stream stream = impl.getStreamFromGlobalPool(gpu);
  NcclCommunicator nccl(NcclCommunicator::uniqueId(), 0, 1, 0, 20000,
                        compat::nativeHandle(stream));
  torch::manual_seed(3);
  for (DataType wire : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    std::vector<torch::Tensor> host = {torch::randn({1000003}) * 3, torch::randn({17}),
                                       torch::randn({65536}) * 1e-3};
    std::vector<torch::Tensor> buckets;
    for (const auto& h : host) buckets.push_back(torch::zeros_like(h, torch::device(gpu)));
    DdpOptions options;
    options.exchangeType = wire;
    const std::vector<Bucket> layout = oneEntryEach(buckets);
    auto codec = makeDeviceCodec(options, host, {"a", "b", "c"}, 1, gpu);
    NcclExchange exchange(nccl, stream, buckets, layout, *codec);
    for (size_t b = 0; b < buckets.size(); ++b) {
      // Written on the compute stream right before the hand-over: the
      // exchange must wait for it (an event), not read stale zeros.
      buckets[b].copy_(host[b].to(gpu, /*non_blocking=*/false) * 2);
      buckets[b].div_(2);
      exchange.ready(b);
    }
    EXPECT_GE(exchange.finish(nullptr), 0.0);
    for (size_t b = 0; b < buckets.size(); ++b) {
      torch::Tensor expected = host[b].clone();
      if (wire != DataType::kFloat32) {
        const auto n = static_cast<size_t>(expected.numel());
        std::vector<uint16_t> onWire(n);
        packFloats(wire, onWire.data(), host[b].data_ptr<float>(), n, 1.0f);
        unpackFloats(wire, expected.data_ptr<float>(), onWire.data(), n, 1.0f);
      }
      EXPECT_TRUE(torch::equal(buckets[b].cpu(), expected))
          << dataTypeName(wire) << " bucket " << b << ": max difference "
          << (buckets[b].cpu() - expected).abs().max().item<float>();
    }
  }
}

// PowerSGD on NCCL's stream: one bucket of a 512 x 300 matrix (compressed
// at rank 4) and a vector, over 3 steps, against the codec on CPU tensors.
TEST(NcclExchange, PowerSgdOnTheStreamMatchesTheCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device gpu(torch::kCUDA, 0);
  const c10::impl::VirtualGuardImpl impl(gpu.type());
  const c10::Stream stream = impl.getStreamFromGlobalPool(gpu);
  NcclCommunicator nccl(NcclCommunicator::uniqueId(), 0, 1, 0, 20000,
                        compat::nativeHandle(stream));
  const std::vector<torch::Tensor> params = {torch::zeros({512, 300}), torch::zeros({512})};
  Bucket bucket;
  bucket.entries = {{0, 0, 512 * 300}, {1, 512 * 300, 512}};
  bucket.numel = 512 * 301;
  const std::vector<Bucket> layout = {bucket};
  PowerSgdOptions o;
  o.rank = 4;
  DevicePowerSgdCodec onGpu(o, DataType::kFloat32, params, {"w", "b"}, 1, gpu);
  DevicePowerSgdCodec onCpu(o, DataType::kFloat32, params, {"w", "b"}, 1, torch::kCPU);
  std::vector<torch::Tensor> buckets = {torch::zeros({bucket.numel}, torch::device(gpu))};
  NcclExchange exchange(nccl, stream, buckets, layout, onGpu);
  OneRankDeviceWire cpuWire;
  torch::manual_seed(5);
  for (int step = 0; step < 3; ++step) {
    torch::Tensor g = torch::randn({bucket.numel});
    g.narrow(0, 0, 512 * 300).view({512, 300}).add_(torch::mm(torch::randn({512, 3}),
                                                              torch::randn({3, 300})));
    buckets[0].copy_(g.to(gpu));
    exchange.ready(0);
    EXPECT_GE(exchange.finish(nullptr), 0.0);
    onCpu.exchange(0, bucket, g, cpuWire);
    const torch::Tensor got = buckets[0].cpu();
    EXPECT_TRUE(got.isfinite().all().item<bool>()) << "step " << step;
    EXPECT_LE((got - g).abs().max().item<float>(), 1e-4f * g.abs().max().item<float>())
        << "step " << step;
    EXPECT_TRUE(torch::equal(got.narrow(0, 512 * 300, 512), g.narrow(0, 512 * 300, 512)));
  }
}

}  // namespace
}  // namespace bigbatch::ddp_detail
