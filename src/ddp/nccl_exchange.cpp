#include "nccl_exchange.h"

#include <ATen/ScalarOps.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "bigbatch/common/error.h"
#include "bigbatch/ddp/stall_watchdog.h"

namespace bigbatch::ddp_detail {
namespace {

torch::ScalarType torchType(DataType t) {
  switch (t) {
    case DataType::kFloat16: return torch::kFloat16;
    case DataType::kBFloat16: return torch::kBFloat16;
    default: return torch::kFloat32;
  }
}

}  // namespace

NcclExchange::NcclExchange(NcclCommunicator& nccl, c10::Stream stream,
                           const std::vector<torch::Tensor>& buckets, DataType wireType)
    : nccl_(nccl), stream_(stream), device_(stream.device()), buckets_(buckets),
      wireType_(wireType),
      inverseRanks_(at::native::wrapped_scalar_tensor(1.0 / static_cast<double>(nccl.size()))),
      done_(stream.device_type()) {
  BIGBATCH_CHECK(!buckets_.empty(), Error, "a NCCL exchange of an empty bucket list");
  BIGBATCH_CHECK(wireType_ == DataType::kFloat32 || wireType_ == DataType::kFloat16 ||
                     wireType_ == DataType::kBFloat16,
                 Error, "wire type {} on the NCCL path", dataTypeName(wireType_));
  for (const auto& b : buckets_) {
    BIGBATCH_CHECK(b.device() == device_ && b.scalar_type() == torch::kFloat32 &&
                       b.is_contiguous() && b.dim() == 1,
                   Error, "the NCCL exchange needs flat fp32 buckets on {}", device_.str());
    ready_.push_back(std::make_unique<c10::Event>(device_.type()));
    if (wireType_ != DataType::kFloat32) {
      wire_.push_back(torch::empty({b.numel()}, b.options().dtype(torchType(wireType_))));
    }
  }
}

void NcclExchange::ready(size_t b) {
  const c10::impl::VirtualGuardImpl impl(device_.type());
  ready_[b]->record(impl.getStream(device_));
  ready_[b]->block(stream_);
  const c10::StreamGuard onNcclStream(stream_);
  torch::NoGradGuard noGrad;
  torch::Tensor& bucket = buckets_[b];
  const auto n = static_cast<size_t>(bucket.numel());
  if (wireType_ == DataType::kFloat32) {
    nccl_.allreduceSum(bucket.data_ptr(), n, DataType::kFloat32);
    return;
  }
  // b·(1/n) computed in fp32 and rounded once, straight into the wire
  // buffer (no temporary): the host path's pack, bit for bit.
  at::mul_out(wire_[b], bucket, inverseRanks_);
  nccl_.allreduceSum(wire_[b].data_ptr(), n, wireType_);
  bucket.copy_(wire_[b]);
  bucket.mul_(static_cast<double>(nccl_.size()));
}

double NcclExchange::finish(StallWatchdog* watchdog) {
  const c10::impl::VirtualGuardImpl impl(device_.type());
  done_.record(stream_);
  done_.block(impl.getStream(device_));
  StallWatchdog::Scope watched(watchdog, StallWatchdog::kComputeThread,
                               "the NCCL gradient allreduce");
  return nccl_.synchronize("the NCCL gradient allreduce");
}

}  // namespace bigbatch::ddp_detail
