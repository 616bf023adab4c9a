// The ASHA scheduler on synthetic accuracy curves: the exact order of jobs
// (starts and promotions), minimisation, failed trials, two workers, the
// rung epochs, and refused inputs.
#include "bigbatch/tune/asha.h"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

using Jobs = std::vector<std::tuple<int, int, double>>;  // trial, rung, epochs

// One worker: every job is reported before the next is asked for.
Jobs runSerially(AshaScheduler& s, const std::vector<double>& quality) {
  Jobs jobs;
  while (auto job = s.next()) {
    jobs.emplace_back(job->trial, job->rung, job->epochs);
    s.report(job->trial, job->rung, quality[job->trial] + 0.01 * job->rung);
  }
  return jobs;
}

TEST(Asha, PromotesTheTopThirdAsSoonAsTheRungAllowsIt) {
  AshaScheduler s({/*minEpochs=*/1, /*maxEpochs=*/9, /*eta=*/3, /*maxTrials=*/9, true});
  ASSERT_EQ(s.rungs(), 3);
  const std::vector<double> q = {0.5, 0.9, 0.1, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4};
  const Jobs jobs = runSerially(s, q);
  // Trial 1 goes up once 3 trials finished rung 0 (keep 3/3 = 1); trial 5
  // once 6 did (keep 2); trial 3 once 9 did (keep 3), and then trial 1 —
  // the best of the 3 at rung 1 — to the top.
  const Jobs want = {{0, 0, 1}, {1, 0, 1}, {2, 0, 1}, {1, 1, 3}, {3, 0, 1}, {4, 0, 1}, {5, 0, 1},
                     {5, 1, 3}, {6, 0, 1}, {7, 0, 1}, {8, 0, 1}, {3, 1, 3}, {1, 2, 9}};
  EXPECT_EQ(jobs, want);
  EXPECT_TRUE(s.finished());
  EXPECT_EQ(s.best(), 1);
  EXPECT_DOUBLE_EQ(*s.metric(1, 2), 0.92);
  EXPECT_FALSE(s.metric(0, 1).has_value());  // stopped early
  // Epochs in all: 9 trials x 1 + 3 x 3 + 1 x 9, against 81 for 9 full runs.
  double epochs = 0;
  for (const auto& j : jobs) epochs += std::get<2>(j);
  EXPECT_DOUBLE_EQ(epochs, 27);
}

TEST(Asha, MinimisesWhenAskedAndBreaksTiesByTheEarlierTrial) {
  AshaScheduler s({1, 3, 3, 6, /*maximize=*/false});
  ASSERT_EQ(s.rungs(), 2);
  // Times to target: trial 4 is fastest; trials 0 and 2 tie.
  const std::vector<double> q = {5, 9, 5, 8, 2, 7};
  const Jobs jobs = runSerially(s, q);
  // Trial 0 (5, ahead of trial 2's 5 by being the earlier trial) goes up at 3
  // finished; trial 4 (2) as soon as it finished — 5 finished keep 1, and it
  // is that one; at 6 finished the best two (4, 0) are both up already.
  const Jobs want = {{0, 0, 1}, {1, 0, 1}, {2, 0, 1}, {0, 1, 3},
                     {3, 0, 1}, {4, 0, 1}, {4, 1, 3}, {5, 0, 1}};
  EXPECT_EQ(jobs, want);
  EXPECT_EQ(s.best(), 4);
}

// With several workers the reports come in the clock's order: a tie still
// goes to the earlier trial, as for best(), not to the earlier report.
TEST(Asha, ATieIsPromotedByTheEarlierTrialWhateverOrderTheReportsCameIn) {
  AshaScheduler s({1, 3, 3, 3, true});
  ASSERT_EQ(s.rungs(), 2);
  for (int t = 0; t < 3; ++t) ASSERT_EQ(s.next()->trial, t);  // three workers
  s.report(2, 0, 0.5);
  s.report(1, 0, 0.8);
  s.report(0, 0, 0.8);  // ties trial 1, reported after it
  const auto up = s.next();
  ASSERT_TRUE(up.has_value());
  EXPECT_EQ(up->trial, 0);
  EXPECT_EQ(up->rung, 1);
}

TEST(Asha, AFailedTrialTakesNoPlaceAndTwoWorkersNeverIdle) {
  AshaScheduler s({1, 3, 3, 4, true});
  // Two workers: two jobs out at once.
  auto a = s.next(), b = s.next();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->trial, 0);
  EXPECT_EQ(b->trial, 1);
  s.fail(b->trial, b->rung);  // trial 1 crashed
  s.report(a->trial, a->rung, 0.4);
  auto c = s.next(), d = s.next();
  ASSERT_TRUE(c && d);
  EXPECT_EQ(c->trial, 2);
  EXPECT_EQ(d->trial, 3);
  EXPECT_FALSE(s.finished());  // two jobs still out
  s.report(d->trial, d->rung, 0.6);
  s.report(c->trial, c->rung, 0.5);
  // Three finished rung 0 (trial 1 does not count): trial 3 goes up.
  auto e = s.next();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->trial, 3);
  EXPECT_EQ(e->rung, 1);
  EXPECT_DOUBLE_EQ(e->epochs, 3);
  EXPECT_FALSE(s.next().has_value());  // budget spent, nothing else to promote
  s.report(e->trial, e->rung, 0.7);
  EXPECT_TRUE(s.finished());
  EXPECT_EQ(s.best(), 3);
  EXPECT_EQ(s.trialsStarted(), 4);
}

TEST(Asha, RungEpochsGrowByEtaAndTheTopIsTheBudget) {
  AshaScheduler a({1, 27, 3, 10, true});
  ASSERT_EQ(a.rungs(), 4);
  EXPECT_DOUBLE_EQ(a.epochsAt(0), 1);
  EXPECT_DOUBLE_EQ(a.epochsAt(1), 3);
  EXPECT_DOUBLE_EQ(a.epochsAt(2), 9);
  EXPECT_DOUBLE_EQ(a.epochsAt(3), 27);
  // A budget between powers: the rungs below stay r_0·η^k and each is at
  // least η below the next — 2, 6, 20, never 2, 6, 18, 20 (a top rung that
  // would re-run nearly what the one below it did).
  AshaScheduler d({2, 20, 3, 10, true});
  ASSERT_EQ(d.rungs(), 3);
  EXPECT_DOUBLE_EQ(d.epochsAt(1), 6);
  EXPECT_DOUBLE_EQ(d.epochsAt(2), 20);
  AshaScheduler b({2, 2, 3, 4, true});  // one rung: plain random search
  EXPECT_EQ(b.rungs(), 1);
  AshaScheduler c({0.5, 8, 4, 4, true});
  ASSERT_EQ(c.rungs(), 3);  // 0.5, 2, 8
  EXPECT_DOUBLE_EQ(c.epochsAt(2), 8);
}

TEST(Asha, RefusesBadOptionsAndReportsItDidNotAskFor) {
  EXPECT_THROW(AshaScheduler({0, 9, 3, 9, true}), InvalidArgument);
  EXPECT_THROW(AshaScheduler({4, 2, 3, 9, true}), InvalidArgument);
  EXPECT_THROW(AshaScheduler({1, 9, 1, 9, true}), InvalidArgument);
  EXPECT_THROW(AshaScheduler({1, 9, 3, 0, true}), InvalidArgument);
  AshaScheduler s({1, 9, 3, 9, true});
  EXPECT_THROW(s.report(0, 0, 0.5), InvalidArgument);  // nothing handed out
  auto job = s.next();
  EXPECT_THROW(s.report(job->trial, 1, 0.5), InvalidArgument);  // wrong rung
  EXPECT_THROW(s.report(job->trial, 0, std::nan("")), InvalidArgument);
  s.report(job->trial, 0, 0.5);
  EXPECT_THROW(s.report(job->trial, 0, 0.5), InvalidArgument);  // twice
}

}  // namespace
}  // namespace bigbatch
