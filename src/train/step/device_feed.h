// DeviceFeed: the training micro-batches on their way to the model's device.
//
// On a GPU, the next micro-batch is taken from the input pipeline while the
// current one computes (prefetch(), called once its forward is enqueued) —
// the pipeline's workers have assembled it in pinned host memory
// (PipelineOptions::pinMemory) — and sent to the device asynchronously on a
// copy stream of its own; next() hands it out after making the compute
// stream wait for the copy (an event, no host wait).
//
// Which stream owns the device memory matters. The caching allocator hands
// a block freed on stream S to the next allocation on S at once: work
// queued later on S runs after the kernels that still read the block, but a
// write from another stream is not ordered behind them. So the destinations
// are allocated on the copy stream (the stream that writes them), and
// next() marks them used on the compute stream (record_stream): when the
// host drops a micro-batch — the previous one, while conv1's weight
// gradient may still read it — the allocator waits for the compute stream's
// work queued up to then before it gives the block to a later copy. A
// destination allocated on the compute stream could instead be a block that
// a still-queued forward had just freed (a cuDNN workspace, a temporary),
// written by the copy stream under that forward: silent wrong inputs. This
// is how PyTorch's own prefetching loaders hand batches across streams.
//
// The destination of each copy is allocated like its pinned source (the
// same strides: a channels-last batch stays channels-last), so the copy is
// one asynchronous DMA from the pinned buffer. A destination of another
// layout would make ATen first copy the source into a contiguous buffer on
// the host — pageable memory, which the driver then copies synchronously:
// the host blocked inside prefetch() for the whole transfer (issue 55).
//
// A pipeline that hands over uint8 pixels (PipelineOptions::uint8Batches)
// sends a quarter of the bytes; the copy stream then mirrors and normalises
// them into the compute dtype (data/device_normalise.h) before next() hands
// the batch over. On the CPU the same ops run in next(), on the caller's
// thread.
//
// Under data.decode = "gpu" the micro-batches come from a GpuJpegPipeline
// (data/gpu_jpeg_pipeline.h) instead: prefetch() queues the next one's JPEG
// decode, crop, flip and normalisation on the copy stream, so the decode of
// micro-batch k+1 runs while k computes, and next() hands it over the same
// way (an event, record_stream).
//
// Internal to src/train. Threading: the compute thread only.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/torch.h>

#include <memory>
#include <optional>

#include "bigbatch/data/device_normalise.h"
#include "bigbatch/data/gpu_jpeg_pipeline.h"
#include "bigbatch/data/input_pipeline.h"

namespace bigbatch::train_detail {

class DeviceFeed {
 public:
  // `inputType`: the dtype uint8 batches are normalised into (the compute
  // dtype); float batches arrive as the pipeline made them.
  DeviceFeed(InputPipeline& pipeline, const torch::Device& device,
             torch::ScalarType inputType = torch::kFloat);
  // Batches decoded on `device` (a CUDA device) by the GPU decode path.
  DeviceFeed(GpuJpegPipeline& pipeline, const torch::Device& device);

  // The next micro-batch, images and labels on the device (the one
  // prefetch() started, else fetched now); false when the pipeline is done.
  bool next(PipelineBatch& batch);
  // Starts the following micro-batch's copy, unless one is on its way.
  void prefetch();
  // TrainOptions::residentBatch: from now on next() hands out the first
  // batch again and again, `count` times in all, with no further copy.
  void replayFirst(int64_t count);

 private:
  bool fetch();  // pipeline -> pinned -> device (async); false at the end
  bool nextResident(PipelineBatch& batch);  // replayFirst()'s next()
  // An allocation like `pinned` (same sizes and strides) on the device,
  // written from it asynchronously on the current (copy) stream.
  torch::Tensor copyToDevice(const torch::Tensor& pinned) const;

  InputPipeline* pipeline_ = nullptr;  // one of the two
  GpuJpegPipeline* gpu_ = nullptr;
  torch::Device device_;
  std::optional<PipelineBatch> ahead_;  // on its way to the device
  bool ended_ = false;
  std::unique_ptr<c10::Event> arrived_;
  std::optional<c10::Stream> copyStream_;
  torch::ScalarType inputType_ = torch::kFloat;
  int64_t replays_ = -1;  // replayFirst(): hand-outs left (-1: off)
  std::optional<PipelineBatch> resident_;
  DeviceNormalisation normalisation_;  // for uint8 batches
};

}  // namespace bigbatch::train_detail
