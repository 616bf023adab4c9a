#include "step/device_feed.h"

#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "bigbatch/common/error.h"

namespace bigbatch::train_detail {

namespace {

// A batch in page-locked memory: the pipeline's own, or pinned now (a batch
// it had to cut, skipping bad samples; pin_memory keeps its strides).
torch::Tensor pinned(const torch::Tensor& t) { return t.is_pinned() ? t : t.pin_memory(); }

}  // namespace

DeviceFeed::DeviceFeed(InputPipeline& pipeline, const torch::Device& device,
                       torch::ScalarType inputType)
    : pipeline_(&pipeline), device_(device), inputType_(inputType) {
  if (pipeline.uint8Batches()) {
    normalisation_ = deviceNormalisation(pipeline.normalisation(), device_);
  }
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
    // (PipelineOptions::pinMemory).
    const torch::Tensor pinnedImages = pinned(b.images);
    const torch::Tensor pinnedLabels = pinned(b.labels);
    // Destinations allocated on the copy stream, which writes them (see
    // the header); next() hands them to the compute stream.
    const c10::StreamGuard onCopyStream(*copyStream_);
    b.images = copyToDevice(pinnedImages);
    b.labels = copyToDevice(pinnedLabels);
    if (b.flips.defined()) {
      // uint8 pixels on the bus: flip and normalise on the device, on the
      // copy stream, into the compute dtype (data/device_normalise.h).
      b.images = normaliseOnDevice(b.images, copyToDevice(pinned(b.flips)), normalisation_,
                                   inputType_);
      b.flips = torch::Tensor();
    }
    arrived_->record(*copyStream_);
  }
  ahead_ = std::move(b);
  return true;
}

torch::Tensor DeviceFeed::copyToDevice(const torch::Tensor& src) const {
  const auto options = src.options().device(device_).pinned_memory(false);
  // Same strides as the source: one DMA from the pinned buffer, no
  // re-layout on the host (see the header).
  torch::Tensor dst = src.is_non_overlapping_and_dense()
                          ? torch::empty_strided(src.sizes(), src.strides(), options)
                          : torch::empty_like(src, options, src.suggest_memory_format());
  dst.copy_(src, /*non_blocking=*/true);
  return dst;
}

void DeviceFeed::prefetch() {
  if (replays_ >= 0) return;  // the resident batch: nothing to fetch
  if (copyStream_ && !ahead_ && !ended_) fetch();
}

void DeviceFeed::replayFirst(int64_t count) { replays_ = count; }

bool DeviceFeed::nextResident(PipelineBatch& batch) {
  if (replays_ == 0) return false;
  if (!resident_) {
    const int64_t left = replays_;
    replays_ = -1;  // the first batch the usual way, once
    PipelineBatch first;
    const bool got = next(first);
    replays_ = left;
    if (!got) return false;
    resident_ = std::move(first);
  }
  --replays_;
  batch = *resident_;
  return true;
}

bool DeviceFeed::next(PipelineBatch& batch) {
  if (replays_ >= 0) return nextResident(batch);
  if (!copyStream_) {
    if (!pipeline_->next(batch)) return false;
    if (batch.flips.defined()) {  // uint8 on the CPU: flipped and normalised here
      batch.images = normaliseOnDevice(batch.images, batch.flips, normalisation_, inputType_);
      batch.flips = torch::Tensor();
    }
    return true;
  }
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
