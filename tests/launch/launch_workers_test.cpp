// The --workers launcher's CPU plan: each rank gets as many CPUs as it runs
// threads. On the 16-core machine of the outside review, `--workers 2` bound
// each rank of 8 threads to one core (633 img/s against 7,738 on one
// worker): mpirun's `--bind-to core` with cores ÷ ranks threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "bigbatch/common/cpu_affinity.h"
#include "bigbatch/common/error.h"
#include "bigbatch/launch/launch_workers.h"

namespace bigbatch {
namespace {

bool has(const std::vector<std::string>& args, const std::string& a, const std::string& b) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == a && args[i + 1] == b) return true;
  }
  return false;
}

TEST(Launcher, EachRankGetsAsManyCpusAsThreads) {
  int pin = -1;
  const auto args = mpirunArguments(2, /*threadsPerRank=*/0, /*cpus=*/16, /*root=*/true, &pin);
  EXPECT_EQ(pin, 8);  // 2 ranks x 8 threads, 8 CPUs each
  EXPECT_TRUE(has(args, "-np", "2"));
  EXPECT_TRUE(has(args, "--bind-to", "none"));  // the ranks bind themselves
  EXPECT_EQ(std::count(args.begin(), args.end(), "core"), 0);
  EXPECT_EQ(std::count(args.begin(), args.end(), "--allow-run-as-root"), 1);
  EXPECT_EQ(std::count(args.begin(), args.end(), "--oversubscribe"), 1);  // SMT: slots are cores

  mpirunArguments(16, 0, 16, false, &pin);
  EXPECT_EQ(pin, 1);
  mpirunArguments(4, 0, 16, false, &pin);
  EXPECT_EQ(pin, 4);
  mpirunArguments(2, 6, 16, false, &pin);  // run.threads = 6: 12 of 16 CPUs, 6 each
  EXPECT_EQ(pin, 6);
  mpirunArguments(2, 12, 16, false, &pin);  // 24 threads on 16 CPUs: shared, unpinned
  EXPECT_EQ(pin, 0);
  mpirunArguments(3, 0, 2, false, &pin);  // more ranks than CPUs
  EXPECT_EQ(pin, 0);
  const auto user = mpirunArguments(2, 0, 16, false, &pin);
  EXPECT_EQ(std::count(user.begin(), user.end(), "--allow-run-as-root"), 0);
}

// BIGBATCH_MPIRUN: the user's launcher (here with a hostfile) in mpirun's
// place, the same options after it, and no pinning — its ranks may be on
// other hosts, whose CPUs this machine's count does not describe.
TEST(Launcher, BigbatchMpirunReplacesMpirunAndTurnsPinningOff) {
  setenv("BIGBATCH_MPIRUN", "/opt/mpi/bin/mpirun  --hostfile hosts", 1);
  const auto args = workerLaunch(2, /*threadsPerRank=*/1, {"train", "x.toml"});
  ASSERT_GE(args.size(), 6u);
  EXPECT_EQ(args[0], "/opt/mpi/bin/mpirun");
  EXPECT_EQ(args[1], "--hostfile");
  EXPECT_EQ(args[2], "hosts");
  EXPECT_TRUE(has(args, "-np", "2"));
  EXPECT_EQ(args[args.size() - 2], "train");
  EXPECT_EQ(std::getenv("BIGBATCH_CPUS_PER_RANK"), nullptr);

  setenv("BIGBATCH_MPIRUN", "  ", 1);
  EXPECT_THROW(mpirunLauncher(), InvalidArgument);
  unsetenv("BIGBATCH_MPIRUN");
  EXPECT_EQ(mpirunLauncher(), std::vector<std::string>{"mpirun"});
  EXPECT_EQ(workerLaunch(2, 1, {"train"})[0], "mpirun");
  EXPECT_STREQ(std::getenv("BIGBATCH_CPUS_PER_RANK"), "1");  // 2 ranks x 1 thread, pinned

  setenv("SLURM_JOB_NUM_NODES", "2", 1);  // mpirun in an allocation of 2 nodes
  workerLaunch(2, 1, {"train"});
  EXPECT_EQ(std::getenv("BIGBATCH_CPUS_PER_RANK"), nullptr);
  unsetenv("SLURM_JOB_NUM_NODES");
}

// Local rank r pins itself to the r-th run of T CPUs it may use — here in a
// thread of its own, whose mask the process's other threads do not share.
TEST(Launcher, ALaunchedRankPinsItselfToItsShareOfTheCpus) {
  const std::vector<int> cpus = allowedCpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs 2 CPUs";
  std::vector<int> seen;
  std::thread rank([&] {
    setenv("BIGBATCH_CPUS_PER_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    pinLaunchedRank();
    seen = allowedCpus();
    unsetenv("BIGBATCH_CPUS_PER_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  });
  rank.join();
  EXPECT_EQ(seen, std::vector<int>{cpus[1]});
  EXPECT_EQ(allowedCpus(), cpus);  // this thread kept its mask
  EXPECT_EQ(formatCpuList({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
}

}  // namespace
}  // namespace bigbatch
