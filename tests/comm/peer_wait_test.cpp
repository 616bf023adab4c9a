// PeerWait: the background mark is per thread, and a background thread's
// long wait sleeps (a lower bound on time, which sleeping guarantees).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "bigbatch/comm/peer_wait.h"

namespace bigbatch {
namespace {

TEST(PeerWait, BackgroundMarkIsPerThread) {
  EXPECT_FALSE(PeerWait::background());
  bool seenInThread = false, seenAfterUnmark = true;
  std::thread t([&] {
    PeerWait::setBackground(true);
    seenInThread = PeerWait::background();
    PeerWait::setBackground(false);
    seenAfterUnmark = PeerWait::background();
  });
  t.join();
  EXPECT_TRUE(seenInThread);
  EXPECT_FALSE(seenAfterUnmark);
  EXPECT_FALSE(PeerWait::background());  // this thread never was marked
}

TEST(PeerWait, BackgroundThreadSleepsPastTheSpin) {
  double seconds = 0;
  uint64_t polls = 0;
  std::thread t([&] {
    PeerWait::setBackground(true);
    PeerWait w;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 300; ++i) w.idle();
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    polls = w.polls();
  });
  t.join();
  EXPECT_EQ(polls, 300u);
  // 256 spins, then 44 sleeps of 5, 10, 20, 40, 80, 160 and 38 x 200 µs:
  // at least 7.915 ms.
  EXPECT_GE(seconds, 7.9e-3);
}

}  // namespace
}  // namespace bigbatch
