#include "device_feed.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "bigbatch/common/error.h"

namespace bigbatch::train_detail {

DeviceFeed::DeviceFeed(InputPipeline& pipeline, const torch::Device& device)
    : pipeline_(&pipeline), device_(device) {
  if (device_.is_cpu()) return;
  const c10::impl::VirtualGuardImpl impl(device_.type());
  copyStream_ = impl.getStreamFromGlobalPool(device_);
  arrived_ = std::make_unique<c10::Event>(device_.type());
}

DeviceFeed::DeviceFeed(GpuJpegPipeline& pipeline, const torch::Device& device)
    : gpu_(&pipeline), device_(device) {
  BIGBATCH_REQUIRE(device_.is_cuda(), InvalidArgument,
                   "the GPU decode path feeds a CUDA device, not {}", device_.str());
  const c10::impl::VirtualGuardImpl impl(device_.type());
  copyStream_ = impl.getStreamFromGlobalPool(device_);
  arrived_ = std::make_unique<c10::Event>(device_.type());
}

bool DeviceFeed::fetch() {
  PipelineBatch b;
  if (gpu_) {
    // Decoded, cropped and normalised by work queued on the copy stream.
    if (!gpu_->next(b, *copyStream_)) {
      ended_ = true;
      return false;
    }
    if (b.size() > 0) arrived_->record(*copyStream_);
    ahead_ = std::move(b);
    return true;
  }
  if (!pipeline_->next(b)) {
    ended_ = true;
    return false;
  }
  if (b.size() > 0) {
    torch::NoGradGuard noGrad;
    // The pipeline assembles batches in pinned memory on a GPU run
    // (PipelineOptions::pinMemory); one it had to cut (skipped bad
    // samples) is pinned here.
    const torch::Tensor pinnedImages = b.images.is_pinned() ? b.images : b.images.pin_memory();
    const torch::Tensor pinnedLabels = b.labels.is_pinned() ? b.labels : b.labels.pin_memory();
    // Destinations allocated on the copy stream, which writes them (see
    // the header); next() hands them to the compute stream.
    const c10::StreamGuard onCopyStream(*copyStream_);
    torch::Tensor images = torch::empty(b.images.sizes(), b.images.options().device(device_));
    torch::Tensor labels = torch::empty(b.labels.sizes(), b.labels.options().device(device_));
    images.copy_(pinnedImages, /*non_blocking=*/true);
    labels.copy_(pinnedLabels, /*non_blocking=*/true);
    arrived_->record(*copyStream_);
    b.images = images;
    b.labels = labels;
  }
  ahead_ = std::move(b);
  return true;
}

void DeviceFeed::prefetch() {
  if (copyStream_ && !ahead_ && !ended_) fetch();
}

bool DeviceFeed::next(PipelineBatch& batch) {
  if (!copyStream_) return pipeline_->next(batch);
  if (!ahead_ && (ended_ || !fetch())) return false;
  batch = std::move(*ahead_);
  ahead_.reset();
  if (batch.size() > 0) {
    const c10::impl::VirtualGuardImpl impl(device_.type());
    const c10::Stream compute = impl.getStream(device_);
    arrived_->block(compute);  // the compute stream waits, not the host
    // Used on the compute stream from here on: the allocator gives these
    // blocks to no later copy before the compute work queued by the time
    // the host drops them has run.
    batch.images.record_stream(compute);
    batch.labels.record_stream(compute);
  }
  return true;
}

}  // namespace bigbatch::train_detail
