// Where a supervised job's workers run (worker_placement.h): the hosts from
// the launcher's hostfile or host list, rank r's host and slot under
// mpirun's mapping by slot, a lost rank's slot left out — a host with no
// slot left out entirely — and what the next attempt is given: --host with
// the slots left, and BIGBATCH_SLOTS for the ranks.
#include "bigbatch/launch/worker_placement.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "bigbatch/common/error.h"
#include "bigbatch/common/launch_slot.h"

namespace bigbatch {
namespace {

TEST(WorkerPlacement, OneLocalHostWithoutAHostOption) {
  std::string why;
  auto p = WorkerPlacement::forLauncher({"mpirun"}, 3, &why);
  ASSERT_TRUE(p.has_value()) << why;
  EXPECT_EQ(p->placeOf(2), std::make_pair(0, 2));
  EXPECT_TRUE(p->hostArguments().empty());  // the local host: mpirun's default
  EXPECT_EQ(p->drop(0), "slot 0 of this host");
  EXPECT_EQ(p->workers(), 2);
  EXPECT_EQ(p->slotPlan(), "1,2");
  EXPECT_EQ(p->placeOf(0), std::make_pair(0, 1));  // rank 0 now runs in slot 1
  EXPECT_TRUE(p->hostArguments().empty());
}

TEST(WorkerPlacement, AHostfileFillsItsHostsInOrder) {
  const std::string file = ::testing::TempDir() + "/hosts-" + std::to_string(::getpid());
  std::ofstream(file) << "# two nodes\nnodeA slots=2\n\nnodeB slots=2 max_slots=4  # the second\n";
  std::string why;
  auto p = WorkerPlacement::forLauncher({"mpirun", "--hostfile", file, "--mca", "x", "y"}, 3, &why);
  ASSERT_TRUE(p.has_value()) << why;
  // Ranks 0, 1 on nodeA; rank 2 on nodeB (3 of its 4 slots used).
  EXPECT_EQ(p->placeOf(1), std::make_pair(0, 1));
  EXPECT_EQ(p->placeOf(2), std::make_pair(1, 0));
  EXPECT_EQ(p->hostArguments(), (std::vector<std::string>{"--host", "nodeA:2,nodeB:1"}));
  EXPECT_EQ(p->drop(2), "slot 0 of host nodeB, its last: the host");
  EXPECT_EQ(p->hostArguments(), (std::vector<std::string>{"--host", "nodeA:2"}));
  EXPECT_EQ(p->slotPlan(), "0,1");
  std::remove(file.c_str());
}

TEST(WorkerPlacement, AHostListAndAMiddleSlot) {
  std::string why;
  auto p = WorkerPlacement::forLauncher({"mpirun", "-H", "a:2,b:2"}, 4, &why);
  ASSERT_TRUE(p.has_value()) << why;
  EXPECT_EQ(p->drop(1), "slot 1 of host a");
  EXPECT_EQ(p->hostArguments(), (std::vector<std::string>{"--host", "a:1,b:2"}));
  EXPECT_EQ(p->slotPlan(), "0|0,1");
  EXPECT_EQ(p->drop(1), "slot 0 of host b");  // rank 1 is now b's slot 0
  EXPECT_EQ(p->slotPlan(), "0|1");
}

TEST(WorkerPlacement, UnknownWhereTheLauncherDoesNotSayTheSlots) {
  const std::string file = ::testing::TempDir() + "/hosts-noslots-" + std::to_string(::getpid());
  std::ofstream(file) << "nodeA\nnodeB\n";
  std::string why;
  EXPECT_FALSE(WorkerPlacement::forLauncher({"mpirun", "--hostfile=" + file}, 2, &why).has_value());
  EXPECT_NE(why.find("no slots=N"), std::string::npos) << why;
  EXPECT_FALSE(WorkerPlacement::forLauncher({"mpirun", "--host", "a:1"}, 2, &why).has_value());
  EXPECT_NE(why.find("1 slot(s) for 2 workers"), std::string::npos) << why;
  std::remove(file.c_str());
}

// The ranks' side of it (common/launch_slot.h): the plan read back, a
// rank's slot, and a plan that does not describe the launch ignored.
TEST(LaunchSlot, RanksTakeTheSlotsThePlanLeaves) {
  const auto plan = parseSlotPlan("1,2|0");
  EXPECT_EQ(formatSlotPlan(plan), "1,2|0");
  EXPECT_EQ(slotInPlan(plan, 0, 0), 1);
  EXPECT_EQ(slotInPlan(plan, 1, 1), 2);
  EXPECT_EQ(slotInPlan(plan, 2, 0), 0);    // the second host's first rank
  EXPECT_FALSE(slotInPlan(plan, 2, 1));    // its local rank says another launch
  EXPECT_FALSE(slotInPlan(plan, 3, 0));    // more ranks than the plan holds
  EXPECT_THROW(parseSlotPlan("0,x"), InvalidArgument);
  ::setenv("BIGBATCH_SLOTS", "1,2", 1);
  EXPECT_EQ(launchSlot(0, 0), 1);
  ::unsetenv("BIGBATCH_SLOTS");
  EXPECT_EQ(launchSlot(0, 0), 0);
}

}  // namespace
}  // namespace bigbatch
