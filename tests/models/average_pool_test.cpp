// The deterministic form of adaptive average pooling (models/average_pool.h)
// against ATen's: the same windows, so the same values and gradients to
// float rounding, for the heads the models use (7 -> 3, 7 -> 1) and for
// sizes that do not divide (5 -> 3, 9 -> 4), in both memory formats.
#include "bigbatch/models/average_pool.h"

#include <gtest/gtest.h>

namespace bigbatch {
namespace {

void expectSameAsAten(int64_t h, int64_t w, int64_t oh, int64_t ow, bool channelsLast) {
  torch::manual_seed(h * 100 + w * 10 + oh);
  auto x = torch::randn({2, 5, h, w});
  if (channelsLast) x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  auto a = x.clone().requires_grad_(true);
  auto b = x.clone().requires_grad_(true);
  const auto ya = torch::adaptive_avg_pool2d(a, {oh, ow});
  const auto yb = adaptiveAvgPool2dByMatrices(b, oh, ow);
  ASSERT_EQ(ya.sizes(), yb.sizes());
  // fp32, windows of at most 9 values: a few ulps of values of order 1.
  EXPECT_LT((ya - yb).abs().max().item<double>(), 1e-6) << h << "x" << w << " -> " << oh;
  const auto g = torch::randn(ya.sizes());
  ya.backward(g);
  yb.backward(g);
  EXPECT_LT((a.grad() - b.grad()).abs().max().item<double>(), 1e-6);
}

TEST(AveragePool, TheDeterministicFormAgreesWithAtenInValueAndGradient) {
  for (bool cl : {false, true}) {
    expectSameAsAten(7, 7, 3, 3, cl);
    expectSameAsAten(7, 7, 1, 1, cl);
    expectSameAsAten(5, 5, 3, 3, cl);
    expectSameAsAten(9, 6, 4, 2, cl);
  }
}

TEST(AveragePool, OnTheCpuItIsAtensOwn) {
  const auto x = torch::randn({1, 2, 7, 7});
  EXPECT_TRUE(torch::equal(adaptiveAvgPool2d(x, 3, 3), torch::adaptive_avg_pool2d(x, {3, 3})));
}

}  // namespace
}  // namespace bigbatch
