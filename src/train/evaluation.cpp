#include "evaluation.h"

#include <torch/torch.h>

#include <vector>

#include "bigbatch/data/batch.h"

namespace bigbatch::train_detail {

int64_t evaluateShard(ImageClassifierImpl& model, const Dataset& data, int64_t batch,
                      bool channelsLast, Precision precision, int rank, int worldSize) {
  torch::NoGradGuard noGrad;
  const AutocastScope autocast(precision, c10::DeviceType::CPU);
  model.eval();
  int64_t correct = 0;
  const int64_t lo = data.size() * rank / worldSize, hi = data.size() * (rank + 1) / worldSize;
  std::vector<int64_t> idx;
  for (int64_t begin = lo; begin < hi; begin += batch) {
    const int64_t n = std::min(batch, hi - begin);
    idx.resize(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = begin + i;
    Batch b = assembleBatch(data, idx, AugmentOptions{}, 0, 0, channelsLast);
    correct += model.forward(b.images).argmax(1).eq(b.labels).sum().item<int64_t>();
  }
  model.train();
  return correct;
}

}  // namespace bigbatch::train_detail
