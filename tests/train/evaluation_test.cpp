// Evaluation: the counts of a shard, plain and with flip test-time
// augmentation (train.eval_flip), against the predictions computed here by
// hand from the same model — exact counts, since both run the same ops on
// the same batches.
#include "evaluation.h"

#include <gtest/gtest.h>

#include "bigbatch/data/batch.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/models/model_options.h"

namespace bigbatch::train_detail {
namespace {

// Top-1 hits over `data` (one batch), by the logits or by the mean softmax
// of each image and its mirror.
int64_t handCounted(ImageClassifierImpl& model, const Dataset& data, bool flip) {
  torch::NoGradGuard noGrad;
  model.eval();
  std::vector<int64_t> idx(data.size());
  for (int64_t i = 0; i < data.size(); ++i) idx[i] = i;
  const Batch b = assembleBatch(data, idx, AugmentOptions{}, 0, 0, /*channelsLast=*/false);
  torch::Tensor scores = model.forward(b.images).softmax(1);
  if (flip) scores = scores + model.forward(b.images.flip({3})).softmax(1);
  model.train();
  return scores.argmax(1).eq(b.labels).sum().item<int64_t>();
}

// Images whose left or right half is the bright one (label 0 or 1): a
// mirror turns one class into the other.
Dataset leftOrRight(int64_t n, uint64_t seed) {
  Dataset d = makeSyntheticDataset(n, 1, 28, 28, 2, seed);
  d.images = (d.images / 4).to(torch::kUInt8);  // dim noise
  for (int64_t i = 0; i < n; ++i) {
    const int64_t side = d.labels[i].item<int64_t>();
    d.images[i].narrow(2, side * 14, 14).add_(160);
  }
  return d;
}

TEST(Evaluation, FlipAveragesTheImageAndItsMirror) {
  torch::manual_seed(1);
  ModelOptions o;
  o.numClasses = 2;
  o.headPool = 2;  // the classifier sees which half is bright
  auto model = buildModel(o);
  const Dataset train = leftOrRight(512, 7);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int step = 0; step < 16; ++step) {
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < 32; ++i) idx.push_back((step * 32 + i) % train.size());
    const Batch b = assembleBatch(train, idx, AugmentOptions{}, 0, 0, false);
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(b.images), b.labels).backward();
    sgd.step();
  }
  const Dataset test = leftOrRight(300, 8);
  EvalSettings s;
  s.batch = 128;  // 3 batches, the last one short
  const EvalCounts plain = evaluateShard(*model, test, s);
  s.flip = true;
  const EvalCounts flipped = evaluateShard(*model, test, s);
  EXPECT_EQ(plain.samples, 300);
  EXPECT_EQ(flipped.samples, 300);
  EXPECT_GT(plain.top1, 270) << "the model did not learn left from right";
  EXPECT_EQ(plain.top1, handCounted(*model, test, false));
  EXPECT_EQ(flipped.top1, handCounted(*model, test, true));
  // Averaged with its mirror, an image looks like both classes: many
  // predictions change (a flag that did nothing would keep the count).
  EXPECT_LT(flipped.top1, plain.top1 - 30);
}

}  // namespace
}  // namespace bigbatch::train_detail
