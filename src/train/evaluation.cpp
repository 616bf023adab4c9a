#include "evaluation.h"

#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "bigbatch/data/batch.h"

namespace bigbatch::train_detail {
namespace {

void count(const torch::Tensor& logits, const torch::Tensor& labels, EvalCounts& c) {
  // argmax for top-1, as PyTorch users compute it (ties go to the first).
  c.top1 += logits.argmax(1).eq(labels).sum().item<int64_t>();
  const int64_t k = std::min<int64_t>(5, logits.size(1));
  const torch::Tensor top = std::get<1>(logits.topk(k, 1));  // [B, k]
  c.top5 += top.eq(labels.unsqueeze(1)).any(1).sum().item<int64_t>();
  c.samples += labels.size(0);
}

}  // namespace

EvalCounts evaluateShard(ImageClassifierImpl& model, const Dataset& data, int64_t batch,
                         bool channelsLast, Precision precision, int rank, int worldSize) {
  torch::NoGradGuard noGrad;
  const AutocastScope autocast(precision, c10::DeviceType::CPU);
  model.eval();
  EvalCounts c;
  const int64_t lo = data.size() * rank / worldSize, hi = data.size() * (rank + 1) / worldSize;
  std::vector<int64_t> idx;
  for (int64_t begin = lo; begin < hi; begin += batch) {
    const int64_t n = std::min(batch, hi - begin);
    idx.resize(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = begin + i;
    Batch b = assembleBatch(data, idx, AugmentOptions{}, 0, 0, channelsLast);
    count(model.forward(b.images), b.labels, c);
  }
  model.train();
  return c;
}

EvalCounts evaluateSourceShard(ImageClassifierImpl& model,
                               std::shared_ptr<const ImageSource> source,
                               const ImageAugment& augment, const PipelineOptions& pipeline,
                               int64_t batch, Precision precision, int rank, int worldSize) {
  torch::NoGradGuard noGrad;
  const AutocastScope autocast(precision, c10::DeviceType::CPU);
  const int64_t size = source->size();
  const int64_t lo = size * rank / worldSize, hi = size * (rank + 1) / worldSize;
  std::vector<std::vector<int64_t>> batches;
  for (int64_t begin = lo; begin < hi; begin += batch) {
    std::vector<int64_t> idx;
    for (int64_t i = begin; i < std::min(hi, begin + batch); ++i) idx.push_back(i);
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
    if (b.size() > 0) count(model.forward(b.images), b.labels, c);
  }
  model.train();
  return c;
}

}  // namespace bigbatch::train_detail
