// Where a supervised job's workers run (worker_placement.h): the hosts from
// the launcher's hostfile or host list (or from the ranks' own reports), a
// lost rank's slot left out — where that rank said it ran, whatever the
// launcher's mapping, else where mapping by slot puts it — a host with no
// slot left out entirely, and what the next attempt is given: each
// launcher's host options for the slots left (rank_launcher.h), and
// BIGBATCH_SLOTS for the ranks.
#include "bigbatch/launch/worker_placement.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "bigbatch/common/error.h"
#include "bigbatch/common/launch_slot.h"
#include "bigbatch/launch/rank_launcher.h"

namespace bigbatch {
namespace {

RankPlace place(int rank, const std::string& host, const std::string& address, int local,
                int slot) {
  return RankPlace{rank, HostIdentity{host, {address}}, local, slot};
}

TEST(WorkerPlacement, OneLocalHostWithoutAHostOption) {
  std::string why;
  auto p = WorkerPlacement::forLauncher({"mpirun"}, 3, &why);
  ASSERT_TRUE(p.has_value()) << why;
  const auto mpirun = RankLauncher::named("mpirun");
  EXPECT_EQ(p->placeOf(2), std::make_pair(0, 2));
  EXPECT_TRUE(mpirun->hostArguments(*p).empty());  // the local host: mpirun's default
  EXPECT_EQ(p->drop(0),
            "slot 0 of this host (as mapping by slot places it: the rank never said where it ran)");
  EXPECT_EQ(p->workers(), 2);
  EXPECT_EQ(p->slotPlan(), "=1,2");
  EXPECT_EQ(p->placeOf(0), std::make_pair(0, 1));  // rank 0 now runs in slot 1
  EXPECT_TRUE(mpirun->hostArguments(*p).empty());
}

TEST(WorkerPlacement, AHostfileFillsItsHostsInOrder) {
  const std::string file = ::testing::TempDir() + "/hosts-" + std::to_string(::getpid());
  std::ofstream(file) << "# two nodes\nnodeA slots=2\n\nnodeB slots=2 max_slots=4  # the second\n";
  std::string why;
  auto p = WorkerPlacement::forLauncher({"mpirun", "--hostfile", file, "--mca", "x", "y"}, 3, &why);
  ASSERT_TRUE(p.has_value()) << why;
  const auto mpirun = RankLauncher::named("mpirun");
  // Ranks 0, 1 on nodeA; rank 2 on nodeB (3 of its 4 slots used).
  EXPECT_EQ(p->placeOf(1), std::make_pair(0, 1));
  EXPECT_EQ(p->placeOf(2), std::make_pair(1, 0));
  EXPECT_EQ(mpirun->hostArguments(*p), (std::vector<std::string>{"--host", "nodeA:2,nodeB:1"}));
  const std::vector<RankPlace> said = {place(0, "nodeA", "10.0.0.1", 0, 0),
                                       place(1, "nodeA", "10.0.0.1", 1, 1),
                                       place(2, "nodeB", "10.0.0.2", 0, 0)};
  EXPECT_EQ(p->drop(2, said), "slot 0 of host nodeB, its last: the host");
  EXPECT_EQ(mpirun->hostArguments(*p), (std::vector<std::string>{"--host", "nodeA:2"}));
  EXPECT_EQ(p->slotPlan(), "nodeA=0,1");
  std::remove(file.c_str());
}

// mpirun --map-by node: rank 1 runs on the second host, not in the first
// host's slot 1 where mapping by slot would put it. The rank's own report
// decides what is left out.
TEST(WorkerPlacement, TheFailedRanksOwnReportUnderMappingByNode) {
  std::string why;
  auto p = WorkerPlacement::forLauncher(
      {"mpirun", "--map-by", "node", "--host", "10.0.0.1:2,10.0.0.2:2"}, 4, &why);
  ASSERT_TRUE(p.has_value()) << why;
  const std::vector<RankPlace> byNode = {
      place(0, "h0", "10.0.0.1", 0, 0), place(1, "h1", "10.0.0.2", 0, 0),
      place(2, "h0", "10.0.0.1", 1, 1), place(3, "h1", "10.0.0.2", 1, 1)};
  EXPECT_EQ(p->drop(1, byNode), "slot 0 of host 10.0.0.2");
  EXPECT_EQ(p->slotPlan(), "10.0.0.1=0,1|10.0.0.2=1");
  EXPECT_EQ(RankLauncher::named("mpirun")->hostArguments(*p),
            (std::vector<std::string>{"--host", "10.0.0.1:2,10.0.0.2:1"}));
  // The next attempt's ranks, under any mapping, take these by local rank.
  const auto plan = parseSlotPlan(p->slotPlan());
  EXPECT_EQ(slotInPlan(plan, HostIdentity{"h1", {"10.0.0.2"}}, 0), 1);
  EXPECT_EQ(slotInPlan(plan, HostIdentity{"h0", {"10.0.0.1"}}, 1), 1);
}

TEST(WorkerPlacement, AHostListAndAMiddleSlot) {
  std::string why;
  auto p = WorkerPlacement::forLauncher({"mpirun", "-H", "a:2,b:2"}, 4, &why);
  ASSERT_TRUE(p.has_value()) << why;
  EXPECT_EQ(p->drop(1, {place(1, "a", "10.1.0.1", 1, 1)}), "slot 1 of host a");
  EXPECT_EQ(RankLauncher::named("mpirun")->hostArguments(*p),
            (std::vector<std::string>{"--host", "a:1,b:2"}));
  EXPECT_EQ(p->slotPlan(), "a=0|b=0,1");
  EXPECT_EQ(p->drop(1, {place(1, "b", "10.1.0.2", 0, 0)}), "slot 0 of host b");
  EXPECT_EQ(p->slotPlan(), "a=0|b=1");
}

// srun in an allocation names no hosts: the ranks' reports do, and the
// next attempt is laid out node by node in rank order.
TEST(WorkerPlacement, FromTheRanksReportsUnderSrun) {
  std::string why;
  ::setenv("SLURM_JOB_NUM_NODES", "2", 1);
  EXPECT_FALSE(WorkerPlacement::forLauncher({"srun"}, 4, &why).has_value());
  ::unsetenv("SLURM_JOB_NUM_NODES");
  const std::vector<RankPlace> said = {
      place(0, "n1", "10.2.0.1", 0, 0), place(1, "n1", "10.2.0.1", 1, 1),
      place(2, "n2", "10.2.0.2", 0, 0), place(3, "n2", "10.2.0.2", 1, 1)};
  WorkerPlacement p = WorkerPlacement::fromReports(said);
  ASSERT_EQ(p.hosts().size(), 2u);
  EXPECT_EQ(p.drop(3, said), "slot 1 of host n2");
  EXPECT_EQ(RankLauncher::named("srun")->hostArguments(p),
            (std::vector<std::string>{"--distribution=arbitrary", "--nodelist=n1,n1,n2"}));
  EXPECT_EQ(p.slotPlan(), "n1=0,1|n2=0");
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

}  // namespace
}  // namespace bigbatch
