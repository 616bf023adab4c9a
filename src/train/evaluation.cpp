#include "evaluation.h"

#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "bigbatch/data/batch.h"
#include "step/device_feed.h"

namespace bigbatch::train_detail {
namespace {

// The class scores of a batch: the logits, or with `flip` the sum of the
// softmax of the batch and of its mirror (horizontal flip; the ranking of
// the sum is that of the mean). Test-time augmentation as Krizhevsky et al.
// 2012 averaged their crops' predictions and fast.ai's DAWNBench entries
// their flips.
torch::Tensor scoresOf(ImageClassifierImpl& model, const torch::Tensor& x, bool flip) {
  torch::Tensor logits = model.forward(x);
  if (!flip) return logits;
  const torch::Tensor mirror = x.flip({3}).contiguous(x.suggest_memory_format());
  return logits.softmax(1, torch::kFloat32) + model.forward(mirror).softmax(1, torch::kFloat32);
}

// Top-1 and top-5 hits summed on the device over a shard and read back once
// at its end: one wait for the GPU per evaluation, not two per batch.
class HitCounter {
 public:
  explicit HitCounter(const torch::Device& device)
      : hits_(torch::zeros({2}, torch::TensorOptions(torch::kLong).device(device))) {}

  void add(const torch::Tensor& scores, const torch::Tensor& labels) {
    // argmax for top-1, as PyTorch users compute it (ties go to the first).
    const torch::Tensor top1 = scores.argmax(1).eq(labels).sum();
    const int64_t k = std::min<int64_t>(5, scores.size(1));
    const torch::Tensor top = std::get<1>(scores.topk(k, 1));  // [B, k]
    const torch::Tensor top5 = top.eq(labels.unsqueeze(1)).any(1).sum();
    hits_ += torch::stack({top1, top5});
  }

  void readInto(EvalCounts& c) const {
    const torch::Tensor host = hits_.to(torch::kCPU);
    c.top1 = host[0].item<int64_t>();
    c.top5 = host[1].item<int64_t>();
  }

 private:
  torch::Tensor hits_;
};

void evaluateBatch(ImageClassifierImpl& model, const torch::Tensor& images,
                   const torch::Tensor& labels, const EvalSettings& s, HitCounter& hits,
                   EvalCounts& c) {
  const torch::Device& device = s.device;
  hits.add(scoresOf(model, images.to(device, /*non_blocking=*/true), s.flip),
           labels.to(device, /*non_blocking=*/true));
  c.samples += labels.size(0);
}

}  // namespace

EvalCounts evaluateShard(ImageClassifierImpl& model, const Dataset& data, const EvalSettings& s) {
  torch::NoGradGuard noGrad;
  const AutocastScope autocast(s.precision, s.device.type());
  model.eval();
  EvalCounts c;
  HitCounter hits(s.device);
  const int64_t lo = data.size() * s.rank / s.worldSize;
  const int64_t hi = data.size() * (s.rank + 1) / s.worldSize;
  std::vector<int64_t> idx;
  for (int64_t begin = lo; begin < hi; begin += s.batch) {
    const int64_t n = std::min(s.batch, hi - begin);
    idx.resize(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = begin + i;
    Batch b = assembleBatch(data, idx, AugmentOptions{}, 0, 0, s.channelsLast);
    evaluateBatch(model, b.images, b.labels, s, hits, c);
  }
  hits.readInto(c);
  model.train();
  return c;
}

EvalCounts evaluateSourceShard(ImageClassifierImpl& model,
                               std::shared_ptr<const ImageSource> source,
                               const ImageAugment& augment, const PipelineOptions& pipeline,
                               const EvalSettings& s) {
  torch::NoGradGuard noGrad;
  const AutocastScope autocast(s.precision, s.device.type());
  const int64_t size = source->size();
  const int64_t lo = size * s.rank / s.worldSize, hi = size * (s.rank + 1) / s.worldSize;
  std::vector<std::vector<int64_t>> batches;
  for (int64_t begin = lo; begin < hi; begin += s.batch) {
    std::vector<int64_t> idx;
    for (int64_t i = begin; i < std::min(hi, begin + s.batch); ++i) idx.push_back(i);
    batches.push_back(std::move(idx));
  }
  EvalCounts c;
  if (batches.empty()) return c;
  model.eval();
  HitCounter hits(s.device);
  PipelineBatch b;
  // The augmentation has no random choice; seed and epoch do not matter.
  if (s.gpuDecode) {
    GpuJpegPipeline input(*s.gpuDecode, std::move(source), augment, /*seed=*/0, /*epoch=*/0,
                          std::move(batches));
    DeviceFeed feed(input, s.device);
    while (feed.next(b)) {
      if (b.size() > 0) evaluateBatch(model, b.images, b.labels, s, hits, c);
      feed.prefetch();  // the next batch decodes while this one's forward runs
    }
  } else {
    InputPipeline input(std::move(source), augment, pipeline, /*seed=*/0, /*epoch=*/0,
                        std::move(batches));
    while (input.next(b)) {
      if (b.size() > 0) evaluateBatch(model, b.images, b.labels, s, hits, c);
    }
  }
  hits.readInto(c);
  model.train();
  return c;
}

}  // namespace bigbatch::train_detail
