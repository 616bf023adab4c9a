// One device's rate as a function of its batch (device_curve.h): a fixed
// cost per step plus a cost per image, fitted to measured points with
// their residuals; one point says what it assumes; bad input is named.
#include "bigbatch/plan/device_curve.h"

#include <gtest/gtest.h>

#include "bigbatch/common/error.h"

namespace bigbatch::plan {
namespace {

TEST(DeviceCurve, TwoPointsGiveTheFixedCostAndTheCostPerImage) {
  // 10 ms + 0.1 ms a image: 30 ms at 200 (6,667 img/s), 11.6 ms at 16.
  const DeviceCurve c = DeviceCurve::fit({{200 / 0.030, 200}, {16 / 0.0116, 16}});
  EXPECT_NEAR(c.fixedS(), 0.010, 1e-9);
  EXPECT_NEAR(c.perImageS(), 0.0001, 1e-12);
  EXPECT_NEAR(c.imgS(64), 64 / 0.0164, 1e-6);
  for (const double r : c.residuals()) EXPECT_NEAR(r, 0, 1e-9);
  EXPECT_NE(c.describe().find("step = 10.000 ms + 0.1000 ms x B"), std::string::npos)
      << c.describe();
}

TEST(DeviceCurve, MorePointsAreFittedOnRelativeErrorsWithResiduals) {
  // 2 ms + 0.05 ms a image, each point's rate off by a few percent.
  std::vector<RatePoint> points;
  const double off[] = {1.03, 0.98, 1.01, 0.99};
  const int batches[] = {16, 32, 128, 256};
  for (int i = 0; i < 4; ++i) {
    points.push_back({off[i] * batches[i] / (0.002 + batches[i] * 0.00005), batches[i]});
  }
  const DeviceCurve c = DeviceCurve::fit(points);
  EXPECT_NEAR(c.fixedS(), 0.002, 0.0002);
  EXPECT_NEAR(c.perImageS(), 0.00005, 0.000003);
  ASSERT_EQ(c.residuals().size(), 4u);
  for (const double r : c.residuals()) EXPECT_LT(std::abs(r), 0.04);
}

TEST(DeviceCurve, OnePointAssumesTheSameRateAtEveryBatch) {
  const DeviceCurve c = DeviceCurve::fit({{1000, 64}});
  EXPECT_EQ(c.fixedS(), 0);
  EXPECT_DOUBLE_EQ(c.imgS(16), 1000);
  EXPECT_NE(c.describe().find("no fixed cost per step assumed"), std::string::npos);
}

TEST(DeviceCurve, ANegativeFixedCostIsTakenAsNone) {
  // The rate falling as the batch grows (a cache that no longer holds the
  // activations): 0.1 s at 100, 0.222 s at 200, a line through -22 ms.
  const DeviceCurve c = DeviceCurve::fit({{1000, 100}, {900, 200}});
  EXPECT_EQ(c.fixedS(), 0);
  EXPECT_GT(c.perImageS(), 0);
  EXPECT_NE(c.describe().find("taken as 0"), std::string::npos);
}

TEST(DeviceCurve, ParsesRatesAtBatchesAndNamesBadInput) {
  const auto p = parseRatePoints("7161.2@400,4908.3@50", 0);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].batch, 400);
  EXPECT_DOUBLE_EQ(p[1].imgS, 4908.3);
  EXPECT_EQ(parseRatePoints("1442.6", 208)[0].batch, 208);
  EXPECT_THROW(parseRatePoints("1442.6", 0), InvalidArgument);  // no batch anywhere
  EXPECT_THROW(parseRatePoints("fast@400", 0), InvalidArgument);
  EXPECT_THROW(parseRatePoints("700@40.5", 0), InvalidArgument);
  EXPECT_THROW(parseRatePoints("-5@40", 0), InvalidArgument);
  EXPECT_THROW(parseRatePoints("", 0), InvalidArgument);
  EXPECT_THROW(DeviceCurve::fit({{1000, 64}, {1100, 64}}), InvalidArgument);  // one batch twice
}

}  // namespace
}  // namespace bigbatch::plan
