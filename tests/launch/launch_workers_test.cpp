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
#include "bigbatch/common/supervision_env.h"
#include "bigbatch/launch/launch_workers.h"
#include "bigbatch/launch/rank_launcher.h"

namespace bigbatch {
namespace {

bool has(const std::vector<std::string>& args, const std::string& a, const std::string& b) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == a && args[i + 1] == b) return true;
  }
  return false;
}

TEST(Launcher, EachRankGetsAsManyCpusAsThreads) {
  EXPECT_EQ(cpusPerRank(2, /*threadsPerRank=*/0, /*cpus=*/16), 8);  // 2 ranks x 8 threads
  EXPECT_EQ(cpusPerRank(16, 0, 16), 1);
  EXPECT_EQ(cpusPerRank(4, 0, 16), 4);
  EXPECT_EQ(cpusPerRank(2, 6, 16), 6);   // run.threads = 6: 12 of 16 CPUs, 6 each
  EXPECT_EQ(cpusPerRank(2, 12, 16), 0);  // 24 threads on 16 CPUs: shared, unpinned
  EXPECT_EQ(cpusPerRank(3, 0, 2), 0);    // more ranks than CPUs
  const auto mpirun = RankLauncher::named("mpirun");
  const auto args = mpirun->rankArguments(2, /*root=*/true);
  EXPECT_TRUE(has(args, "-np", "2"));
  EXPECT_TRUE(has(args, "--bind-to", "none"));  // the ranks bind themselves
  EXPECT_EQ(std::count(args.begin(), args.end(), "core"), 0);
  EXPECT_EQ(std::count(args.begin(), args.end(), "--allow-run-as-root"), 1);
  EXPECT_EQ(std::count(args.begin(), args.end(), "--oversubscribe"), 1);  // SMT: slots are cores
  const auto user = mpirun->rankArguments(2, false);
  EXPECT_EQ(std::count(user.begin(), user.end(), "--allow-run-as-root"), 0);
  EXPECT_THROW(RankLauncher::named("torchrun"), InvalidArgument);
}

// What the ranks need travels on the command line, never by the ranks
// sharing this environment (ssh-started hosts see none of it): mpirun gets
// `-x NAME` for every variable of kRankEnvironment that is set — the
// supervisor's slots, step file, restart count, job clock, placement file
// — and srun --export=ALL.
TEST(Launcher, TheRanksVariablesGoOnTheCommandLine) {
  for (const char* name : kRankEnvironment) unsetenv(name);
  setenv(kSlotsEnv, "a=0,1|b=1", 1);
  setenv(kJobRunStartEnv, "1765000000000", 1);
  setenv(kRestartCountEnv, "2", 1);
  setenv(kStepFileEnv, "/run/x/.supervisor_step", 1);
  setenv("NCCL_SOCKET_IFNAME", "ib0", 1);  // a cluster's network, exported by the user
  const auto args = workerLaunch(*RankLauncher::named("mpirun"), 2, 1, {"train", "x.toml"});
  for (const char* name : {kSlotsEnv, kJobRunStartEnv, kRestartCountEnv, kStepFileEnv,
                           kStdoutTtyEnv}) {
    EXPECT_TRUE(has(args, "-x", name)) << name;
  }
  // Set only where the ranks pin themselves (2+ CPUs here): named when set.
  EXPECT_EQ(has(args, "-x", kCpusPerRankEnv), std::getenv(kCpusPerRankEnv) != nullptr);
  EXPECT_FALSE(has(args, "-x", kPlacementFileEnv));  // not set: not named
  EXPECT_TRUE(has(args, "-x", "NCCL_SOCKET_IFNAME"));
  unsetenv("NCCL_SOCKET_IFNAME");
  // Before the program (this binary, then its arguments): mpirun's options
  // end where it begins.
  const auto train = std::find(args.begin(), args.end(), "train");
  ASSERT_NE(train, args.end());
  EXPECT_EQ(std::find(train - 1, args.end(), "-x"), args.end());

  const auto srun = workerLaunch(*RankLauncher::named("srun"), 2, 1, {"train"});
  EXPECT_EQ(srun[0], "srun");
  EXPECT_TRUE(has(srun, "--ntasks", "2"));
  EXPECT_EQ(std::count(srun.begin(), srun.end(), "--export=ALL"), 1);
  EXPECT_EQ(std::count(srun.begin(), srun.end(), "--kill-on-bad-exit=1"), 1);
  EXPECT_EQ(std::count(srun.begin(), srun.end(), "--mpi=pmix"), 1);
  setenv("SLURM_MPI_TYPE", "pmi2", 1);  // a site's choice stands
  const auto site = RankLauncher::named("srun")->rankArguments(2, false);
  EXPECT_EQ(std::count(site.begin(), site.end(), "--mpi=pmix"), 0);
  unsetenv("SLURM_MPI_TYPE");
  for (const char* name : kRankEnvironment) unsetenv(name);
}

// BIGBATCH_MPIRUN: the user's launcher (here with a hostfile) in mpirun's
// place, the same options after it, and no pinning — its ranks may be on
// other hosts, whose CPUs this machine's count does not describe.
TEST(Launcher, BigbatchMpirunReplacesMpirunAndTurnsPinningOff) {
  const auto mpirun = RankLauncher::named("mpirun");
  setenv("BIGBATCH_MPIRUN", "/opt/mpi/bin/mpirun  --hostfile hosts", 1);
  const auto args = workerLaunch(*mpirun, 2, /*threadsPerRank=*/1, {"train", "x.toml"});
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
  EXPECT_EQ(workerLaunch(*mpirun, 2, 1, {"train"})[0], "mpirun");
  EXPECT_STREQ(std::getenv("BIGBATCH_CPUS_PER_RANK"), "1");  // 2 ranks x 1 thread, pinned

  setenv("SLURM_JOB_NUM_NODES", "2", 1);  // mpirun in an allocation of 2 nodes
  workerLaunch(*mpirun, 2, 1, {"train"});
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
