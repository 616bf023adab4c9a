// GpuJpegPipeline: one epoch (or evaluation) of the GPU decode path, the
// host reader feeding the device decoder, batches handed out as the
// InputPipeline's. Threading: next() and stats() from one thread.
#pragma once

#include <c10/core/Stream.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "bigbatch/data/gpu_jpeg_decoder.h"
#include "bigbatch/data/input_pipeline.h"
#include "bigbatch/data/jpeg_batch_reader.h"

namespace bigbatch {

// The run's GPU decode (data.decode = "gpu"), made once at set-up and used
// by every epoch's pipeline and by evaluation.
struct GpuDecodeSettings {
  std::shared_ptr<GpuJpegDecoder> decoder;
  JpegReaderOptions reader;
  torch::ScalarType dtype = torch::kFloat;  // the compute dtype the images are written in
  bool channelsLast = true;                 // NHWC strides
};

// GpuJpegPipeline: one epoch (or one evaluation) of the GPU decode path —
// the host reader (jpeg_batch_reader.h: file bytes, crops and flips, in the
// CPU pipeline's order) feeding the device decoder (gpu_jpeg_decoder.h).
// next() hands out batches as the InputPipeline does (images, labels,
// sample indices, the count skipped), but with images and labels on the GPU,
// their work queued on the stream the caller names: the training feed
// (src/train/step/device_feed.h) queues batch k+1 on its copy stream while the
// compute stream runs step k.
//
// Threading: next() and stats() from one thread (the reader's threads are
// internal).
class GpuJpegPipeline {
 public:
  // Starts the host readers at once. Throws InvalidArgument as
  // JpegBatchReader does.
  GpuJpegPipeline(const GpuDecodeSettings& settings, std::shared_ptr<const ImageSource> source,
                  ImageAugment augment, uint64_t seed, int64_t epoch,
                  std::vector<std::vector<int64_t>> batches);

  // The next batch, its decode, crop, flip and normalisation and its labels'
  // copy queued on `stream` (a stream of the decoder's device), not waited
  // for: images [n, 3, H, W] of settings.dtype, labels int64 [n], both on
  // the device; false after the last batch. A sample no decoder could
  // decode is skipped (or fails the epoch) as the reader's rule says.
  bool next(PipelineBatch& out, const c10::Stream& stream);
  PipelineStats stats() const;

 private:
  GpuDecodeSettings settings_;
  ImageAugment augment_;
  JpegBatchReader reader_;
};

}  // namespace bigbatch
