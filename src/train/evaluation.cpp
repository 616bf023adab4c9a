#include "evaluation.h"

#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "bigbatch/data/batch.h"

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

void evaluateBatch(ImageClassifierImpl& model, const torch::Tensor& images,
                   const torch::Tensor& labels, const EvalSettings& s, EvalCounts& c) {
  const torch::Device& device = s.device;
  const torch::Tensor logits =
      scoresOf(model, images.to(device, /*non_blocking=*/true), s.flip);
  const torch::Tensor onDevice = labels.to(device, /*non_blocking=*/true);
  // argmax for top-1, as PyTorch users compute it (ties go to the first).
  c.top1 += logits.argmax(1).eq(onDevice).sum().item<int64_t>();
  const int64_t k = std::min<int64_t>(5, logits.size(1));
  const torch::Tensor top = std::get<1>(logits.topk(k, 1));  // [B, k]
  c.top5 += top.eq(onDevice.unsqueeze(1)).any(1).sum().item<int64_t>();
  c.samples += labels.size(0);
}

}  // namespace

EvalCounts evaluateShard(ImageClassifierImpl& model, const Dataset& data, const EvalSettings& s) {
  torch::NoGradGuard noGrad;
  const AutocastScope autocast(s.precision, s.device.type());
  model.eval();
  EvalCounts c;
  const int64_t lo = data.size() * s.rank / s.worldSize;
  const int64_t hi = data.size() * (s.rank + 1) / s.worldSize;
  std::vector<int64_t> idx;
  for (int64_t begin = lo; begin < hi; begin += s.batch) {
    const int64_t n = std::min(s.batch, hi - begin);
    idx.resize(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = begin + i;
    Batch b = assembleBatch(data, idx, AugmentOptions{}, 0, 0, s.channelsLast);
    evaluateBatch(model, b.images, b.labels, s, c);
  }
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
  // The augmentation has no random choice; seed and epoch do not matter.
  InputPipeline input(std::move(source), augment, pipeline, /*seed=*/0, /*epoch=*/0,
                      std::move(batches));
  PipelineBatch b;
  while (input.next(b)) {
    if (b.size() > 0) evaluateBatch(model, b.images, b.labels, s, c);
  }
  model.train();
  return c;
}

}  // namespace bigbatch::train_detail
