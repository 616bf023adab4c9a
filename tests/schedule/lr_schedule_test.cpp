// LR schedules against values computed by hand from their formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "bigbatch/common/error.h"
#include "bigbatch/schedule/lr_schedule.h"

namespace bigbatch {
namespace {

TEST(LrSchedule, WarmupThenCosine) {
  LrScheduleOptions o;
  o.baseLr = 0.4;
  o.warmupEpochs = 2;
  o.totalEpochs = 10;
  o.endLr = 0.0;
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.at(0), 0.0);
  EXPECT_DOUBLE_EQ(s.at(1), 0.2);
  EXPECT_DOUBLE_EQ(s.at(2), 0.4);
  EXPECT_NEAR(s.at(6), 0.2, 1e-15);  // halfway through the cosine
  EXPECT_NEAR(s.at(10), 0.0, 1e-15);
}

TEST(LrSchedule, WarmupStartFactor) {
  LrScheduleOptions o;
  o.baseLr = 1.0;
  o.warmupEpochs = 0.5;  // fractional
  o.warmupStartFactor = 0.1;
  o.totalEpochs = 4;
  LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.at(0.25), 0.55);
}

TEST(LrSchedule, PolyStepConstant) {
  LrScheduleOptions o;
  o.baseLr = 2.0;
  o.totalEpochs = 10;
  o.decay = "poly";
  o.polyPower = 2;
  o.endLr = 0.1;
  EXPECT_DOUBLE_EQ(LrSchedule(o).at(5), 0.1 + 1.9 * 0.25);
  o.decay = "step";
  o.stepEpochs = {3, 6};
  o.stepGamma = 0.5;
  EXPECT_DOUBLE_EQ(LrSchedule(o).at(2.9), 2.0);
  EXPECT_DOUBLE_EQ(LrSchedule(o).at(3), 1.0);
  EXPECT_DOUBLE_EQ(LrSchedule(o).at(7), 0.5);
  o.decay = "constant";
  EXPECT_DOUBLE_EQ(LrSchedule(o).at(9), 2.0);
}

TEST(LrSchedule, RejectsBadOptions) {
  LrScheduleOptions o;
  o.decay = "linear-ish";
  EXPECT_THROW(LrSchedule{o}, InvalidArgument);
  o.decay = "cosine";
  o.warmupEpochs = 5;
  o.totalEpochs = 2;
  EXPECT_THROW(LrSchedule{o}, InvalidArgument);
}

TEST(LrSchedule, LinearScalingRule) { EXPECT_DOUBLE_EQ(linearScaledLr(0.1, 4096), 1.6); }

}  // namespace
}  // namespace bigbatch
