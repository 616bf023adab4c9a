// Test accuracy of a model, sharded over the ranks: rank r evaluates the
// r-th contiguous slice of the test set and the trainer sums the counts.
// Internal to src/train; call from the thread that owns the model.
#pragma once

#include <cstdint>
#include <memory>

#include "bigbatch/amp/precision.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/gpu_jpeg_pipeline.h"
#include "bigbatch/data/input_pipeline.h"
#include "bigbatch/models/model_options.h"

namespace bigbatch::train_detail {

// Correct predictions over `samples` evaluated: top-1 (the highest logit is
// the label) and top-5 (the label is among the min(5, classes) highest).
struct EvalCounts {
  int64_t top1 = 0, top5 = 0, samples = 0;
};

// How this rank evaluates: its shard of the test set, in batches of
// `batch`, computed in `precision` on `device` (where the model is).
struct EvalSettings {
  int64_t batch = 1000;
  bool channelsLast = false;  // in-memory data only; the pipeline's options say it otherwise
  Precision precision = Precision::kFp32;
  torch::Device device{torch::kCPU};
  int rank = 0, worldSize = 1;
  // Test-time augmentation (train.eval_flip): each image is classified by
  // the mean of the softmax of it and of its mirror image — one more
  // forward pass per image.
  bool flip = false;
  // data.decode = "gpu": folders' test images through the GPU decode path
  // (the validation crop on the device); null: the input pipeline.
  const GpuDecodeSettings* gpuDecode = nullptr;
};

// In memory (Fashion-MNIST, synthetic): the shard of `data` in chunks of
// s.batch images, as stored. The model is in eval mode (BatchNorm on its
// running statistics) during the call and in train mode after.
EvalCounts evaluateShard(ImageClassifierImpl& model, const Dataset& data, const EvalSettings& s);

// Through the input pipeline (CIFAR-10, image folders): the shard of
// `source` with the validation augmentation (resize and centre crop), in
// batches of `batch`, on the pipeline's threads (or with s.gpuDecode
// decoded on the GPU, the next batch's decode queued while this one's
// forward runs). A sample the pipeline skips (data.bad_samples = "skip") is
// not counted in `samples`.
EvalCounts evaluateSourceShard(ImageClassifierImpl& model,
                               std::shared_ptr<const ImageSource> source,
                               const ImageAugment& augment, const PipelineOptions& pipeline,
                               const EvalSettings& s);

}  // namespace bigbatch::train_detail
