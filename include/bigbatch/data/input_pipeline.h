// The multi-level concurrent input pipeline (the MoXing idea: I/O never
// stalls compute). One InputPipeline feeds one epoch of one rank:
//
//   batches of sample indices (sampler.h: sharded and shuffled per rank and
//   epoch from the seed)
//     -> read     (readThreads)    stored bytes, or the decoded image from the cache
//     -> decode   (decodeThreads)  JPEG / record -> HWC uint8, DCT-scaled to what the crop needs
//     -> augment  (augmentThreads) crop, resize, flip, normalise into the batch's slot
//     -> batches in order, at most `prefetchBatches` ahead of the consumer
//
// Each stage has its own threads and a bounded queue (`queueSamples`) in
// front of it. A batch takes a buffer from a pool before its first sample is
// read, so memory is bounded by prefetchBatches buffers plus the queues; a
// buffer is reused for a later batch once the consumer has dropped it.
// Samples land in fixed slots, so a batch's content does not depend on
// which thread finished first.
//
// Bad data (unreadable file, corrupt or truncated JPEG): `skip` logs the path,
// counts it and leaves the sample out of its batch (labels stay aligned);
// `fail` stops the pipeline and next() throws IoError naming the sample's
// index and path. Destroying the pipeline mid-epoch (early stop, an error
// elsewhere) closes every queue and joins every thread.
//
// Threading: next() and stats() from one consumer thread; the workers are
// internal. A DecodedCache may be shared by the pipelines of later epochs.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bigbatch/data/image_augment.h"
#include "bigbatch/data/image_source.h"

namespace bigbatch {

struct PipelineOptions {
  // Threads per stage; all three 0: inline — next() runs every step of its
  // batch on the caller's thread (no hand-offs; best when a batch costs less
  // than waking a thread, e.g. in-memory 28x28 images on busy cores).
  int readThreads = 1;
  int decodeThreads = 1;
  int augmentThreads = 1;
  int64_t queueSamples = 256;  // capacity of each stage's input queue (samples)
  int prefetchBatches = 2;     // batches ready or in flight ahead of the consumer
  bool skipBadSamples = true;  // false: the first bad sample fails the epoch
  bool channelsLast = false;   // batch memory format (NHWC strides)
  // Batch buffers in page-locked (pinned) memory, for a GPU run (a CUDA
  // build only): the workers write each batch where the copy to the device
  // starts from, with no pass over it on the consumer's thread. Pinned
  // buffers are not reused by the pool — the device copy of a batch the
  // consumer has dropped may still be reading it; freed, they return to
  // libtorch's pinned-memory cache, which hands a block out again only
  // after the copies recorded on it are done.
  bool pinMemory = false;
  // Batches of 8-bit pixels instead of normalised floats: each image
  // cropped and resized into uint8 (rounded), unflipped; its flip in
  // PipelineBatch::flips. The consumer mirrors and normalises them
  // (data/device_normalise.h) — on a GPU run, on the device, after a
  // quarter of the float batch's bytes crossed the bus.
  bool uint8Batches = false;
};

// Decoded images kept across epochs within a byte budget: the first
// `budgetBytes` worth of images decoded stay; later epochs skip reading and
// decoding them. With `shortSide` > 0 an image is cached decoded at the
// smallest DCT scale whose shorter side is still >= shortSide. Thread-safe.
class DecodedCache {
 public:
  DecodedCache(int64_t samples, int64_t budgetBytes, int64_t shortSide = 0);
  std::shared_ptr<const DecodedImage> find(int64_t index) const;
  // Keeps `image` if it fits in what is left of the budget; returns whether.
  bool insert(int64_t index, std::shared_ptr<const DecodedImage> image);
  int64_t bytes() const { return bytes_.load(); }
  int64_t budgetBytes() const { return budget_; }
  int64_t shortSide() const { return shortSide_; }
  int64_t entries() const { return entries_.load(); }

 private:
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<const DecodedImage>> images_;
  int64_t budget_, shortSide_;
  std::atomic<int64_t> bytes_{0}, entries_{0};
};

struct PipelineBatch {
  torch::Tensor images;          // float [B, C, H, W], normalised (uint8 pixels: uint8Batches)
  torch::Tensor labels;          // int64 [B]
  torch::Tensor flips;           // uint8 [B], 1: still to be mirrored (uint8Batches only)
  std::vector<int64_t> indices;  // the sample index of each row
  int64_t skipped = 0;           // bad samples left out of this batch
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

struct PipelineStats {
  int64_t samples = 0;    // delivered
  int64_t skipped = 0;    // bad samples left out
  int64_t decoded = 0;    // decodes done (cache misses)
  int64_t cacheHits = 0;
  std::vector<std::string> skippedWhere;  // the first 100 skipped samples' paths
};

class InputPipeline {
 public:
  // Starts the workers at once. `batches`: this rank's sample indices of each
  // step (ShardPlan::batches). Throws InvalidArgument on bad options or an
  // index out of range.
  InputPipeline(std::shared_ptr<const ImageSource> source, ImageAugment augment,
                PipelineOptions options, uint64_t seed, int64_t epoch,
                std::vector<std::vector<int64_t>> batches,
                std::shared_ptr<DecodedCache> cache = nullptr);
  ~InputPipeline();
  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  // The next batch in order; false after the last. Throws the pipeline's
  // first error (IoError naming sample and path, or a worker's exception).
  bool next(PipelineBatch& out);
  PipelineStats stats() const;
  // Whether batches are uint8 pixels, and the per-channel factors that
  // turn them into the float batch (PipelineOptions::uint8Batches).
  bool uint8Batches() const;
  Normalisation normalisation() const;

  struct State;  // internal

 private:
  std::shared_ptr<State> state_;
};

}  // namespace bigbatch
