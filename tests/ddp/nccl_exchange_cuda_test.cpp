// The DDP's NCCL path on a GPU (CUDA build with NCCL, label "cuda"): the
// buckets handed to NcclExchange as backward would — events on the compute
// stream, the sum on NCCL's stream, the compute stream made to wait — come
// back on one rank as the host exchange would leave them: fp32 unchanged,
// fp16 and bf16 rounded exactly as packFloats/unpackFloats round (the
// host path's wire), every bucket, also when the compute stream is still
// writing a bucket when it is handed over. One rank only: NCCL refuses two
// ranks on one GPU.
#include "nccl_exchange.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/common/torch_compat.h"

namespace bigbatch::ddp_detail {
namespace {

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
    NcclExchange exchange(nccl, stream, buckets, wire);
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

}  // namespace
}  // namespace bigbatch::ddp_detail
