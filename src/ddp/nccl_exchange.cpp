#include "nccl_exchange.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "bigbatch/common/error.h"
#include "bigbatch/ddp/stall_watchdog.h"

namespace bigbatch::ddp_detail {
namespace {

DataType wireTypeOf(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat16: return DataType::kFloat16;
    case torch::kBFloat16: return DataType::kBFloat16;
    case torch::kFloat32: return DataType::kFloat32;
    default:
      BIGBATCH_THROW(Error, "a {} tensor on the NCCL gradient wire", c10::toString(t.scalar_type()));
  }
}

}  // namespace

void NcclExchange::Wire::sum(const torch::Tensor& values) {
  BIGBATCH_CHECK(values.is_contiguous(), Error, "a non-contiguous tensor on the NCCL wire");
  nccl_.allreduceSum(values.data_ptr(), static_cast<size_t>(values.numel()), wireTypeOf(values));
}

NcclExchange::NcclExchange(NcclCommunicator& nccl, c10::Stream stream,
                           const std::vector<torch::Tensor>& buckets,
                           const std::vector<Bucket>& layout, DeviceCodec& codec)
    : nccl_(nccl), stream_(stream), device_(stream.device()), buckets_(buckets), layout_(layout),
      codec_(codec), wire_(nccl), done_(stream.device_type()) {
  BIGBATCH_CHECK(!buckets_.empty() && buckets_.size() == layout_.size(), Error,
                 "a NCCL exchange of {} buckets laid out as {}", buckets_.size(), layout_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const torch::Tensor& t = buckets_[b];
    BIGBATCH_CHECK(t.device() == device_ && t.scalar_type() == torch::kFloat32 &&
                       t.is_contiguous() && t.dim() == 1 && t.numel() == layout_[b].numel,
                   Error, "the NCCL exchange needs flat fp32 buckets on {}", device_.str());
    ready_.push_back(std::make_unique<c10::Event>(device_.type()));
  }
}

void NcclExchange::ready(size_t b) {
  const c10::impl::VirtualGuardImpl impl(device_.type());
  ready_[b]->record(impl.getStream(device_));
  ready_[b]->block(stream_);
  const c10::StreamGuard onNcclStream(stream_);
  codec_.exchange(b, layout_[b], buckets_[b], wire_);
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
