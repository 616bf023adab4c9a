// The ranks' agreement to stop (watch/stop_watch.h): a stop asked of one
// rank only, at its step k, stops every rank after the same step — k + 1,
// the vote started after step k being read after the next one — whatever
// the others were asked. Without the agreement (each rank reading its own
// flag) rank 0 here would never stop.
#include "watch/stop_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "bigbatch/comm/in_process_communicator.h"

namespace bigbatch::train_detail {
namespace {

TEST(StopWatch, OneRanksRequestStopsEveryRankAfterTheSameStep) {
  for (const int askedAt : {1, 3, 6}) {
    constexpr int kRanks = 3;
    auto comms = makeInProcessGroup(kRanks);
    std::vector<int> stoppedAfter(kRanks, -1);
    std::vector<std::thread> ranks;
    for (int r = 0; r < kRanks; ++r) {
      ranks.emplace_back([&, r] {
        JobCollectives job(*comms[r]);
        int step = 0;
        // Only rank 2 is asked, from its step `askedAt` on.
        StopWatch watch(job, [&] { return r == 2 && step >= askedAt; });
        for (step = 1; step <= 10; ++step) {
          if (watch.due()) {
            stoppedAfter[r] = step;
            break;
          }
        }
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < kRanks; ++r) {
      EXPECT_EQ(stoppedAfter[r], askedAt + 1) << "rank " << r << ", asked at " << askedAt;
    }
  }
}

TEST(StopWatch, OneRankStopsAfterTheStepItWasAskedIn) {
  auto comms = makeInProcessGroup(1);
  JobCollectives job(*comms[0]);
  int step = 0;
  StopWatch watch(job, [&] { return step >= 4; });
  for (step = 1; step <= 10 && !watch.due(); ++step) {
  }
  EXPECT_EQ(step, 4);
  EXPECT_TRUE(watch.stopped());
}

}  // namespace
}  // namespace bigbatch::train_detail
