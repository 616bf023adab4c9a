// The stall watchdog fires once, naming the operation, only when a marked
// call outlives its limit; the heartbeat names the rank that is behind.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/ddp/heartbeat.h"
#include "bigbatch/ddp/stall_watchdog.h"

namespace bigbatch {
namespace {

using namespace std::chrono_literals;

TEST(StallWatchdog, FiresOnceForACallPastItsLimit) {
  std::atomic<int> fired{0};
  std::string operation;
  double seconds = 0;
  {
    StallWatchdog w(150ms, [&](const std::string& op, double s) {
      operation = op;
      seconds = s;
      ++fired;
    });
    {
      StallWatchdog::Scope quick(&w, StallWatchdog::kCommThread, "a quick call");
      std::this_thread::sleep_for(20ms);
    }
    std::this_thread::sleep_for(300ms);  // idle: nothing to report
    EXPECT_EQ(fired.load(), 0);
    StallWatchdog::Scope slow(&w, StallWatchdog::kComputeThread, "the gradient allreduce");
    std::this_thread::sleep_for(600ms);
  }
  EXPECT_EQ(fired.load(), 1);
  EXPECT_EQ(operation, "the gradient allreduce");
  EXPECT_GT(seconds, 0.15);
  StallWatchdog::Scope noop(nullptr, StallWatchdog::kCommThread, "no watchdog");  // allowed
}

TEST(Heartbeat, NamesTheRankThatIsBehind) {
  auto comms = makeInProcessGroup(3);
  std::vector<std::unique_ptr<Heartbeat>> beats(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] { beats[r] = std::make_unique<Heartbeat>(*comms[r]); });
  }
  for (auto& t : threads) t.join();
  beats[0]->beat(3, Heartbeat::kExchange);
  beats[1]->beat(3, Heartbeat::kCompute);  // stuck in its compute
  beats[2]->beat(3, Heartbeat::kExchange);
  const std::string who = beats[0]->describeLaggards(3, Heartbeat::kExchange);
  EXPECT_NE(who.find("rank 1 (in the compute of step 3"), std::string::npos) << who;
  EXPECT_EQ(who.find("rank 2"), std::string::npos) << who;
  beats[1]->beat(3, Heartbeat::kExchange);
  EXPECT_NE(beats[0]->describeLaggards(3, Heartbeat::kExchange).find("another host"),
            std::string::npos);
}

}  // namespace
}  // namespace bigbatch
