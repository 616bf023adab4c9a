// Epoch plans: exactly-once coverage across ranks, determinism, and
// augmentation that depends only on (seed, epoch, index).
#include <gtest/gtest.h>

#include "bigbatch/data/batch.h"
#include "bigbatch/data/sampler.h"

namespace bigbatch {
namespace {

TEST(Sampler, EverySampleOncePerEpochAcrossRanks) {
  for (int world : {1, 2, 3, 4}) {
    for (int64_t n : {1000, 1001, 7, 60000}) {
      const int64_t globalBatch = 8 * world;
      std::vector<int> seen(n, 0);
      int64_t steps = -1;
      for (int r = 0; r < world; ++r) {
        ShardPlan plan = planEpoch(n, globalBatch, r, world, 42, 3);
        if (steps >= 0) {
          EXPECT_EQ(plan.steps, steps) << "ranks disagree on step count";
        }
        steps = plan.steps;
        for (const auto& b : plan.batches) {
          EXPECT_LE(static_cast<int64_t>(b.size()), globalBatch / world + 1);
          for (int64_t i : b) ++seen[i];
        }
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "sample " << i << " world " << world;
    }
  }
}

TEST(Sampler, OrderDependsOnSeedAndEpochOnly) {
  EXPECT_EQ(epochPermutation(100, 1, 2), epochPermutation(100, 1, 2));
  EXPECT_NE(epochPermutation(100, 1, 2), epochPermutation(100, 1, 3));
  EXPECT_NE(epochPermutation(100, 1, 2), epochPermutation(100, 2, 2));
}

TEST(Batch, AugmentationDependsOnSampleNotBatch) {
  Dataset d = makeSyntheticDataset(16, 1, 28, 28, 10, 5);
  AugmentOptions aug{true, 2};
  Batch a = assembleBatch(d, {3, 7, 9}, aug, 11, 1, false);
  Batch b = assembleBatch(d, {9, 3}, aug, 11, 1, false);
  EXPECT_TRUE(torch::equal(a.images[0], b.images[1]));
  EXPECT_TRUE(torch::equal(a.images[2], b.images[0]));
  EXPECT_EQ(a.labels[1].item<int64_t>(), d.labels[7].item<int64_t>());
  // Another epoch draws other augmentations for at least one of 16 samples.
  std::vector<int64_t> all(16);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_FALSE(torch::equal(assembleBatch(d, all, aug, 11, 1, false).images,
                            assembleBatch(d, all, aug, 11, 2, false).images));
}

TEST(Batch, NoAugmentationIsPlainNormalisation) {
  Dataset d = makeSyntheticDataset(4, 1, 28, 28, 10, 5);
  Batch b = assembleBatch(d, {0, 1, 2, 3}, AugmentOptions{}, 0, 0, false);
  torch::Tensor expected = (d.images.to(torch::kFloat32) / 255.0 - d.mean) / d.std;
  EXPECT_TRUE(torch::allclose(b.images, expected, 1e-5, 1e-5));
}

}  // namespace
}  // namespace bigbatch
