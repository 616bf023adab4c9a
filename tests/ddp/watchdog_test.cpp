// The stall watchdog fires once, naming the operation, only when a marked
// call outlives its limit, and ticks while it runs; the heartbeat names the
// rank that is behind and the rank whose pulse stopped.
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
  // Every rank of this one-host group is alive and at this step: there is
  // no other host to blame.
  const std::string none = beats[0]->describeLaggards(3, Heartbeat::kExchange);
  EXPECT_NE(none.find("no rank looks stalled"), std::string::npos) << none;
  EXPECT_EQ(none.find("another host"), std::string::npos) << none;
}

// A stopped process (SIGSTOP, a frozen VM) keeps the step and phase it had:
// here rank 2 reached the survivors' step and phase, and only its silent
// pulse tells it apart.
TEST(Heartbeat, NamesARankWhosePulseStoppedWhateverStepItReached) {
  auto comms = makeInProcessGroup(3);
  std::vector<std::unique_ptr<Heartbeat>> beats(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back(
        [&, r] { beats[r] = std::make_unique<Heartbeat>(*comms[r], /*silentAfterS=*/0.3); });
  }
  for (auto& t : threads) t.join();
  for (auto& b : beats) {
    b->beat(7, Heartbeat::kExchange);
    b->pulse();
  }
  EXPECT_NE(beats[0]->describeLaggards(7, Heartbeat::kExchange).find("no rank looks stalled"),
            std::string::npos);
  for (int tick = 0; tick < 10; ++tick) {  // ranks 0 and 1 go on pulsing, rank 2 does not
    std::this_thread::sleep_for(50ms);
    beats[0]->pulse();
    beats[1]->pulse();
  }
  const std::string who = beats[0]->describeLaggards(7, Heartbeat::kExchange);
  EXPECT_NE(who.find("stopped answering: rank 2 (no sign of life for"), std::string::npos) << who;
  EXPECT_NE(who.find("last in the gradient exchange of step 7"), std::string::npos) << who;
  EXPECT_EQ(who.find("rank 1"), std::string::npos) << who;
}

std::vector<std::unique_ptr<Heartbeat>> heartbeats(int size, int perHost, double silentAfterS,
                                                   std::vector<std::unique_ptr<Communicator>>& comms) {
  comms = makeInProcessGroup(size, perHost);
  std::vector<std::unique_ptr<Heartbeat>> beats(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { beats[r] = std::make_unique<Heartbeat>(*comms[r], silentAfterS); });
  }
  for (auto& t : threads) t.join();
  return beats;
}

// Two hosts of two ranks: each host's lowest rank (0 and 2) carries its
// host's table to the other; the others read what arrived from their host's
// shared memory. A rank behind on the other host — not a carrier — is named
// by both ranks of this host, and a rank whose pulse stopped there too.
TEST(Heartbeat, ACarrierPerHostNamesTheRanksOfTheOtherHost) {
  std::vector<std::unique_ptr<Communicator>> comms;
  auto beats = heartbeats(4, 2, /*silentAfterS=*/0.3, comms);
  auto pulseAll = [&](std::initializer_list<int> ranks) {
    for (int r : ranks) beats[r]->pulse();  // carriers send, then take in
    for (int r : ranks) beats[r]->pulse();
  };
  for (auto& b : beats) b->beat(5, Heartbeat::kExchange);
  beats[3]->beat(5, Heartbeat::kCompute);  // host 1's second rank is behind
  pulseAll({0, 1, 2, 3});
  for (int r : {0, 1}) {
    const std::string who = beats[r]->describeLaggards(5, Heartbeat::kExchange);
    EXPECT_NE(who.find("rank 3 on another host (in the compute of step 5"), std::string::npos)
        << "rank " << r << ": " << who;
    EXPECT_EQ(who.find("rank 2"), std::string::npos) << who;
    EXPECT_EQ(who.find("never heard"), std::string::npos) << who;
  }
  beats[3]->beat(5, Heartbeat::kExchange);
  pulseAll({0, 1, 2, 3});
  EXPECT_NE(beats[1]->describeLaggards(5, Heartbeat::kExchange).find("no rank looks stalled"),
            std::string::npos);
  // Rank 3 stops (no more pulses); its carrier, rank 2, goes on sending.
  for (int tick = 0; tick < 10; ++tick) {
    std::this_thread::sleep_for(50ms);
    pulseAll({0, 1, 2});
  }
  const std::string who = beats[1]->describeLaggards(5, Heartbeat::kExchange);
  EXPECT_NE(who.find("rank 3 on another host (no sign of life for"), std::string::npos) << who;
  EXPECT_EQ(who.find("rank 2"), std::string::npos) << who;
}

// A rank on another host whose carrier's datagrams never arrived is named as
// never heard from — not left out as if it were fine.
TEST(Heartbeat, NamesTheRanksOfAHostNeverHeardFrom) {
  std::vector<std::unique_ptr<Communicator>> comms;
  auto beats = heartbeats(4, 2, /*silentAfterS=*/0.2, comms);
  for (auto& b : beats) b->beat(2, Heartbeat::kExchange);
  std::this_thread::sleep_for(300ms);
  beats[0]->pulse();  // host 1's carrier never pulses: nothing ever comes from it
  beats[1]->pulse();
  const std::string who = beats[1]->describeLaggards(2, Heartbeat::kExchange);
  EXPECT_NE(who.find("never heard from rank(s) 2, 3 on other hosts"), std::string::npos) << who;
  EXPECT_EQ(who.find("no rank looks stalled"), std::string::npos) << who;
}

TEST(StallWatchdog, TicksWhileItRuns) {
  std::atomic<int> ticks{0};
  {
    StallWatchdog w(100ms, [](const std::string&, double) {}, [&] { ++ticks; });
    std::this_thread::sleep_for(550ms);
  }
  EXPECT_GE(ticks.load(), 3);  // every 100 ms (the limit, under 200 ms)
}

}  // namespace
}  // namespace bigbatch
