#include "device_staging.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "bigbatch/common/error.h"

namespace bigbatch::ddp_detail {

DeviceStaging::DeviceStaging(const std::vector<torch::Tensor>& buckets,
                             const DeviceStaging* shareStreamOf)
    : buckets_(buckets) {
  BIGBATCH_CHECK(!buckets_.empty(), Error, "device staging of an empty bucket list");
  device_ = buckets_.front().device();
  const bool onDevice = !device_.is_cpu();
  auto options = torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(onDevice);
  for (const auto& b : buckets_) {
    BIGBATCH_CHECK(b.device() == device_ && b.scalar_type() == torch::kFloat32 &&
                       b.is_contiguous() && b.dim() == 1,
                   Error, "device staging needs flat fp32 buckets on one device");
    host_.push_back(torch::empty({b.numel()}, options));
    if (onDevice) ready_.push_back(std::make_unique<c10::Event>(device_.type()));
  }
  if (onDevice && shareStreamOf && shareStreamOf->copyStream_) {
    BIGBATCH_CHECK(shareStreamOf->device_ == device_, Error,
                   "device stagings sharing a copy stream must be on one device");
    copyStream_ = shareStreamOf->copyStream_;
  } else if (onDevice) {
    // A stream of its own, so the copies overlap the backward's kernels.
    const c10::impl::VirtualGuardImpl impl(device_.type());
    copyStream_ = impl.getStreamFromGlobalPool(device_);
  }
}

void DeviceStaging::ready(size_t b) {
  if (!copyStream_) return;
  const c10::impl::VirtualGuardImpl impl(device_.type());
  ready_[b]->record(impl.getStream(device_));
}

float* DeviceStaging::toHost(size_t b, int64_t begin, int64_t end) {
  if (begin < end) {
    copy(b, host_[b].narrow(0, begin, end - begin), buckets_[b].narrow(0, begin, end - begin));
  }
  return host_[b].data_ptr<float>();
}

void DeviceStaging::toDevice(size_t b, int64_t begin, int64_t end) {
  if (begin < end) {
    copy(b, buckets_[b].narrow(0, begin, end - begin), host_[b].narrow(0, begin, end - begin));
  }
}

void DeviceStaging::copy(size_t b, torch::Tensor dst, const torch::Tensor& src) {
  torch::NoGradGuard noGrad;
  if (!copyStream_) {
    dst.copy_(src);
    return;
  }
  const c10::StreamGuard onCopyStream(*copyStream_);
  ready_[b]->block(*copyStream_);
  dst.copy_(src, /*non_blocking=*/true);
  copyStream_->synchronize();
}

}  // namespace bigbatch::ddp_detail
