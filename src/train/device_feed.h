// DeviceFeed: the training micro-batches on their way to the model's device.
//
// On a GPU, the next micro-batch is taken from the input pipeline while the
// current one computes (prefetch(), called once its forward is enqueued) —
// the pipeline's workers have assembled it in pinned host memory
// (PipelineOptions::pinMemory) — and sent to the device asynchronously on a
// copy stream of its own; next() hands it out after making the compute
// stream wait for the copy (an event, no host wait). The device tensors are
// allocated on the compute stream, so the caching allocator never reuses
// them under a kernel that still reads them. On the CPU it is the pipeline
// itself.
//
// Internal to src/train. Threading: the compute thread only.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/torch.h>

#include <memory>
#include <optional>

#include "bigbatch/data/input_pipeline.h"

namespace bigbatch::train_detail {

class DeviceFeed {
 public:
  DeviceFeed(InputPipeline& pipeline, const torch::Device& device);

  // The next micro-batch, images and labels on the device (the one
  // prefetch() started, else fetched now); false when the pipeline is done.
  bool next(PipelineBatch& batch);
  // Starts the following micro-batch's copy, unless one is on its way.
  void prefetch();

 private:
  bool fetch();  // pipeline -> pinned -> device (async); false at the end

  InputPipeline& pipeline_;
  torch::Device device_;
  std::optional<PipelineBatch> ahead_;  // on its way to the device
  bool ended_ = false;
  std::unique_ptr<c10::Event> arrived_;
  std::optional<c10::Stream> copyStream_;
};

}  // namespace bigbatch::train_detail
