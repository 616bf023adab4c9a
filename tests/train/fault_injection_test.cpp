// When a planned fault fires (fault_injection.h): at its step or the first
// site after it, once per process, only on its rank and in the attempts
// fault.attempts allows; NaN faults only at a step.
#include "watch/fault_injection.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "bigbatch/common/error.h"
#include "bigbatch/common/supervision_env.h"

namespace bigbatch::train_detail {
namespace {

// Rank r in slot r of host "h0".
FaultInjector::Placement at(int rank) { return {rank, rank, "h0"}; }

FaultPlan plan(const char* during, int64_t step, int64_t attempts = 0) {
  FaultPlan p;
  p.kind = "throw";
  p.rank = 1;
  p.step = step;
  p.during = during;
  p.attempts = attempts;
  return p;
}

TEST(FaultInjector, StepAndExchangeFireAtTheirStepOnly) {
  for (const char* site : {"step", "exchange"}) {
    FaultInjector f(plan(site, 5), at(1));
    EXPECT_FALSE(f.due(site, 4));
    EXPECT_FALSE(f.due(site, 6));  // a step past it is not the step
    EXPECT_TRUE(f.due(site, 5));
    EXPECT_FALSE(f.due(site, 5));  // once per process
  }
}

TEST(FaultInjector, EvaluationAndCheckpointFireAtTheFirstSiteAtOrAfterTheStep) {
  for (const char* site : {"evaluation", "checkpoint"}) {
    FaultInjector f(plan(site, 5), at(1));
    EXPECT_FALSE(f.due(site, 3));
    EXPECT_FALSE(f.due("step", 7));  // another site
    EXPECT_TRUE(f.due(site, 7));
    EXPECT_FALSE(f.due(site, 9));
  }
}

TEST(FaultInjector, OnlyOnItsRank) {
  FaultInjector f(plan("step", 5), at(0));
  EXPECT_FALSE(f.due("step", 5));
  FaultPlan none = plan("step", 5);
  none.kind = "none";
  FaultInjector g(none, at(1));
  EXPECT_FALSE(g.due("step", 5));
}

// fault.host and fault.slot name a place, not a rank: the rank there
// fires, whichever it is; fault.rank no longer counts.
TEST(FaultInjector, HostAndSlotNameAPlaceNotARank) {
  FaultPlan p = plan("step", 5);
  p.slot = 0;
  EXPECT_TRUE(FaultInjector(p, {3, 0, "h0"}).due("step", 5));
  EXPECT_FALSE(FaultInjector(p, {1, 1, "h0"}).due("step", 5));  // fault.rank 1, other slot
  p.slot = -1;
  p.host = "h1";
  EXPECT_TRUE(FaultInjector(p, {0, 0, "h1"}).due("step", 5));
  EXPECT_TRUE(FaultInjector(p, {2, 1, "h1"}).due("step", 5));
  EXPECT_FALSE(FaultInjector(p, {1, 1, "h0"}).due("step", 5));
  p.slot = 1;  // both: that slot of that host
  EXPECT_FALSE(FaultInjector(p, {0, 0, "h1"}).due("step", 5));
  EXPECT_TRUE(FaultInjector(p, {2, 1, "h1"}).due("step", 5));
}

TEST(FaultInjector, AttemptsCountsTheSupervisorsRestarts) {
  ::unsetenv(kRestartCountEnv);  // unsupervised: the first attempt
  EXPECT_TRUE(FaultInjector(plan("step", 5, 1), at(1)).due("step", 5));
  ::setenv(kRestartCountEnv, "1", 1);
  EXPECT_FALSE(FaultInjector(plan("step", 5, 1), at(1)).due("step", 5));
  EXPECT_TRUE(FaultInjector(plan("step", 5, 2), at(1)).due("step", 5));
  EXPECT_TRUE(FaultInjector(plan("step", 5, 0), at(1)).due("step", 5));  // every attempt
  ::unsetenv(kRestartCountEnv);
}

TEST(FaultInjector, ThrowNamesRankStepAndSite) {
  FaultInjector f(plan("exchange", 5), at(1));
  try {
    f.injectIfDue("exchange", 5);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("on rank 1 at step 5 (during exchange)"),
              std::string::npos)
        << e.what();
  }
  f.injectIfDue("exchange", 5);  // fired already: returns
}

TEST(FaultInjector, NanOnlyAtAStep) {
  FaultPlan p = plan("checkpoint", 5);
  p.kind = "nan";
  EXPECT_THROW(FaultInjector(p, at(1)), InvalidArgument);
  p.during = "step";
  FaultInjector f(p, at(1));
  f.injectIfDue("step", 5);  // returns: the step poisons its loss
}

}  // namespace
}  // namespace bigbatch::train_detail
