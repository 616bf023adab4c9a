// Which rank a failed attempt's messages name: the supervisor takes a rank
// named twice in a row as lost (--min-workers), so a survivor's line that
// reaches mpirun's stderr first must still name the rank that failed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "bigbatch/launch/supervise_workers.h"

namespace bigbatch {
namespace {

TEST(Supervisor, AnErrorLineNamesTheRankThatFailed) {
  EXPECT_EQ(failedRankIn("bigbatch: error: [rank 2] injected fault (fault.kind = throw) on rank 2 "
                         "at step 5 (during step)"),
            2);
  // A survivor's line blames its peer.
  EXPECT_EQ(failedRankIn("bigbatch: error: [rank 0] rank 2 failed: [rank 2] injected fault"), 2);
  EXPECT_EQ(failedRankIn("bigbatch: error: [rank 0] step 12: stopped answering: rank 1 on another "
                         "host (no sign of life for 10.0 s)"),
            1);
  EXPECT_EQ(failedRankIn("bigbatch: error: cannot open 'x.toml'"), -1);
}

// A termination request that arrives between two attempts — after one
// failed, before the next starts — stops the job: no other attempt starts.
// The launcher here fails at once and counts its starts; the test's hook
// raises SIGTERM in that window.
TEST(Supervisor, ATerminationRequestBetweenAttemptsStartsNoOtherAttempt) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("supervisor-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path launcher = dir / "launcher.sh";
  {
    std::ofstream out(launcher);
    out << "#!/bin/sh\necho started >> " << (dir / "starts").string() << "\nexit 1\n";
  }
  fs::permissions(launcher, fs::perms::owner_all);
  setenv("BIGBATCH_MPIRUN", launcher.c_str(), 1);
  SupervisorSettings s;
  s.workers = 2;
  s.maxRestarts = 3;
  s.batchPerRank = 1;
  s.globalBatch = 2;
  s.runDir = (dir / "run").string();
  s.checkpointDir = (dir / "run" / "checkpoints").string();
  s.betweenAttempts = [](int) { std::raise(SIGTERM); };
  const char* argv[] = {"bigbatch", "train", "x.toml"};
  const int status = superviseWorkers(s, 3, const_cast<char**>(argv));
  unsetenv("BIGBATCH_MPIRUN");
  EXPECT_EQ(status, 128 + SIGTERM);
  std::ifstream starts(dir / "starts");
  int n = 0;
  for (std::string line; std::getline(starts, line);) ++n;
  EXPECT_EQ(n, 1) << "attempts started";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bigbatch
