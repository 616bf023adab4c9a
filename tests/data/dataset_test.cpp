// makeSyntheticDataset: each image and label a function of (seed, index)
// alone — the same for any set size and thread count — uniform bytes and
// labels, and sizes that are no multiple of the 8-byte word.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <vector>

#include "bigbatch/common/error.h"
#include "bigbatch/data/dataset.h"

namespace bigbatch {
namespace {

TEST(SyntheticDataset, ImagesAndLabelsDependOnSeedAndIndexOnly) {
  const Dataset big = makeSyntheticDataset(50, 3, 7, 5, 10, 9);  // 105 bytes an image
  const Dataset small = makeSyntheticDataset(5, 3, 7, 5, 10, 9);
  ASSERT_EQ(big.images.sizes(), (std::vector<int64_t>{50, 3, 7, 5}));
  EXPECT_EQ(big.images.scalar_type(), torch::kUInt8);
  EXPECT_EQ(big.labels.scalar_type(), torch::kInt64);
  EXPECT_TRUE(torch::equal(small.images, big.images.narrow(0, 0, 5)));
  EXPECT_TRUE(torch::equal(small.labels, big.labels.narrow(0, 0, 5)));
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const Dataset serial = makeSyntheticDataset(50, 3, 7, 5, 10, 9);
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(serial.images, big.images));
  EXPECT_TRUE(torch::equal(serial.labels, big.labels));
  const Dataset other = makeSyntheticDataset(50, 3, 7, 5, 10, 10);
  EXPECT_GT(other.images.ne(big.images).sum().item<int64_t>(), 50 * 105 * 9 / 10);
  // No two images alike, and the last byte of an image (the word's tail)
  // is as random as the rest.
  for (int64_t i = 1; i < 50; ++i) EXPECT_FALSE(torch::equal(big.images[i], big.images[0])) << i;
  const torch::Tensor last = big.images.flatten(1).select(1, 104);
  EXPECT_GT((torch::bincount(last.to(torch::kInt64), {}, 256) > 0).sum().item<int64_t>(), 30);
}

// Bytes uniform over 0..255 and labels over the classes: 614,400 bytes give
// 2,400 a value (standard deviation ~49), 20,000 labels 2,000 a class
// (~42); the bounds are more than 7 standard deviations wide.
TEST(SyntheticDataset, BytesAndLabelsAreUniform) {
  const Dataset d = makeSyntheticDataset(20000, 1, 1, 1, 10, 3);
  const torch::Tensor perClass = torch::bincount(d.labels, {}, 10);
  EXPECT_GE(d.labels.min().item<int64_t>(), 0);
  EXPECT_LE(d.labels.max().item<int64_t>(), 9);
  EXPECT_GT(perClass.min().item<int64_t>(), 2000 - 300);
  EXPECT_LT(perClass.max().item<int64_t>(), 2000 + 300);
  const Dataset img = makeSyntheticDataset(200, 3, 32, 32, 10, 4);
  const torch::Tensor perValue = torch::bincount(img.images.flatten().to(torch::kInt64), {}, 256);
  ASSERT_EQ(perValue.numel(), 256);
  EXPECT_GT(perValue.min().item<int64_t>(), 2400 - 360);
  EXPECT_LT(perValue.max().item<int64_t>(), 2400 + 360);
}

TEST(SyntheticDataset, SizesAndClassesBelowOneAreRefused) {
  EXPECT_THROW(makeSyntheticDataset(4, 0, 8, 8, 10, 1), InvalidArgument);
  EXPECT_THROW(makeSyntheticDataset(4, 1, 8, 8, 0, 1), InvalidArgument);
  EXPECT_EQ(makeSyntheticDataset(0, 1, 8, 8, 10, 1).size(), 0);
}

}  // namespace
}  // namespace bigbatch
