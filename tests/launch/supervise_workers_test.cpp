// Which rank a failed attempt's messages name: the supervisor takes a rank
// named twice in a row as lost (--min-workers), so a survivor's line that
// reaches mpirun's stderr first must still name the rank that failed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bigbatch/launch/supervise_workers.h"

#include "bigbatch/launch/launch_workers.h"
#include "bigbatch/launch/rank_launcher.h"

#include "bigbatch/common/stop_request.h"
#include "bigbatch/common/supervision_env.h"

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

// A fake launcher for the supervisor: a script that appends its arguments
// to `dir`/calls, one line per attempt, then runs `body`.
std::string fakeLauncher(const std::filesystem::path& dir, const std::string& body) {
  const std::filesystem::path launcher = dir / "launcher.sh";
  {
    std::ofstream out(launcher);
    out << "#!/bin/sh\necho \"$*\" >> " << (dir / "calls").string() << "\n" << body << "\n";
  }
  std::filesystem::permissions(launcher, std::filesystem::perms::owner_all);
  return launcher.string();
}

std::vector<std::string> linesOf(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

SupervisorSettings settingsIn(const std::filesystem::path& dir) {
  SupervisorSettings s;
  s.workers = 2;
  s.maxRestarts = 2;
  s.batchPerRank = 1;
  s.globalBatch = 2;
  s.runDir = (dir / "run").string();
  s.checkpointDir = (dir / "run" / "checkpoints").string();
  std::filesystem::create_directories(s.checkpointDir);
  return s;
}

std::filesystem::path freshDir(const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / (name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Each attempt's launcher is handed the supervisor's variables on its
// command line (`-x NAME`), not through the environment it inherits: on
// ssh-started hosts nothing else would reach the ranks. And the variables
// a supervision set are gone when it returns — a second supervision in one
// process got the first job's clock and slots (outside review).
TEST(Supervisor, TheRanksVariablesTravelAndAreGoneAfterwards) {
  const auto dir = freshDir("supervisor-env");
  // Attempt 1 writes an MLPerf run_start (the job's clock starts there) and
  // fails; attempt 2 succeeds.
  const std::string log = (dir / "run" / "mlperf.log").string();
  setenv("BIGBATCH_MPIRUN",
         fakeLauncher(dir, "if [ ! -f " + (dir / "once").string() + " ]; then touch " +
                               (dir / "once").string() +
                               "; echo ':::MLLOG {\"namespace\": \"\", \"time_ms\": "
                               "1765000000123, \"event_type\": \"INTERVAL_START\", \"key\": "
                               "\"run_start\"}' > " + log + "; exit 1; fi; echo '{}' > " +
                               (dir / "run" / "summary.json").string() + "; exit 0")
             .c_str(),
         1);
  SupervisorSettings s = settingsIn(dir);
  const char* argv[] = {"bigbatch", "train", "x.toml"};
  EXPECT_EQ(superviseWorkers(s, 3, const_cast<char**>(argv)), 0);
  unsetenv("BIGBATCH_MPIRUN");
  const auto calls = linesOf(dir / "calls");
  ASSERT_EQ(calls.size(), 2u);
  for (const char* name : {"BIGBATCH_RESTART_COUNT", "BIGBATCH_STEP_FILE", "BIGBATCH_SUPERVISOR",
                           "BIGBATCH_PLACEMENT_FILE", "BIGBATCH_STDOUT_TTY"}) {
    EXPECT_NE(calls[0].find(std::string("-x ") + name), std::string::npos) << calls[0];
  }
  EXPECT_EQ(calls[0].find("BIGBATCH_JOB_RUN_START_MS"), std::string::npos) << calls[0];
  // The second attempt continues the first one's clock.
  EXPECT_NE(calls[1].find("-x BIGBATCH_JOB_RUN_START_MS"), std::string::npos) << calls[1];
  for (const char* name : kRankEnvironment) {
    if (std::string(name) == kStdoutTtyEnv || std::string(name) == kCpusPerRankEnv) continue;
    EXPECT_EQ(std::getenv(name), nullptr) << name << " outlived the supervision";
  }
  std::filesystem::remove_all(dir);
}

// An attempt whose exit status is lost (waitpid: ECHILD — here SIGCHLD's
// SA_NOCLDWAIT, which reaps every child at once) is a failure, never a
// success nobody saw: the supervisor restarts it and gives up after its
// restarts. It used to return 0 at once.
TEST(Supervisor, ALostExitStatusIsAFailure) {
  const auto dir = freshDir("supervisor-echild");
  // A launcher that ran the job to its end (summary.json written), whose
  // exit status only is lost.
  setenv("BIGBATCH_MPIRUN",
         fakeLauncher(dir, "echo '{}' > " + (dir / "run" / "summary.json").string() + "; exit 0")
             .c_str(),
         1);
  struct sigaction reapAll {}, previous {};
  reapAll.sa_handler = SIG_DFL;
  reapAll.sa_flags = SA_NOCLDWAIT;
  sigemptyset(&reapAll.sa_mask);
  sigaction(SIGCHLD, &reapAll, &previous);
  SupervisorSettings s = settingsIn(dir);
  const char* argv[] = {"bigbatch", "train", "x.toml"};
  const int status = superviseWorkers(s, 3, const_cast<char**>(argv));
  sigaction(SIGCHLD, &previous, nullptr);
  unsetenv("BIGBATCH_MPIRUN");
  EXPECT_EQ(status, 1);
  EXPECT_EQ(linesOf(dir / "calls").size(), 3u);  // the attempt and its 2 restarts
  std::filesystem::remove_all(dir);
}

// A launcher that exits 0 for a job that never ran (srun whose step could
// not be launched did, on the emulated Slurm) is a failure, not a finished
// job: a finished run leaves summary.json.
TEST(Supervisor, AZeroFromALauncherWhoseRunDidNotFinishIsAFailure) {
  const auto dir = freshDir("supervisor-unfinished");
  setenv("BIGBATCH_MPIRUN", fakeLauncher(dir, "exit 0").c_str(), 1);
  SupervisorSettings s = settingsIn(dir);
  const char* argv[] = {"bigbatch", "train", "x.toml"};
  EXPECT_EQ(superviseWorkers(s, 3, const_cast<char**>(argv)), 1);
  unsetenv("BIGBATCH_MPIRUN");
  EXPECT_EQ(linesOf(dir / "calls").size(), 3u);
  std::ifstream restarts(dir / "run" / "restarts.json");
  std::stringstream text;
  text << restarts.rdbuf();
  EXPECT_NE(text.str().find("wrote no summary.json"), std::string::npos) << text.str();
  std::filesystem::remove_all(dir);
}

// The ranks stopped on request (SIGUSR1: each checkpointed at one step and
// exited 75): no restart — outside Slurm the supervisor exits 75, "stopped,
// resumable" (under Slurm it requeues the job; tests/apps/slurm_test.sh).
TEST(Supervisor, AStopOnRequestIsNotRestarted) {
  const auto dir = freshDir("supervisor-stop");
  setenv("BIGBATCH_MPIRUN", fakeLauncher(dir, "exit 75").c_str(), 1);
  unsetenv("SLURM_JOB_ID");
  SupervisorSettings s = settingsIn(dir);
  const char* argv[] = {"bigbatch", "train", "x.toml"};
  EXPECT_EQ(superviseWorkers(s, 3, const_cast<char**>(argv)), kStoppedExitStatus);
  unsetenv("BIGBATCH_MPIRUN");
  EXPECT_EQ(linesOf(dir / "calls").size(), 1u);
  std::filesystem::remove_all(dir);
}

// A stop asked before the launch — SIGUSR1 while the run's data, model or
// checkpoint are read, before any job exists — ends the run as stopped
// without starting the job: started, mpirun would get the signal before it
// can handle it, and die of it (outside review).
TEST(Supervisor, AStopAskedBeforeTheLaunchStartsNoJob) {
  const auto dir = freshDir("launch-stop");
  setenv("BIGBATCH_MPIRUN", fakeLauncher(dir, "exit 0").c_str(), 1);
  unsetenv("SLURM_JOB_ID");
  armStopRequest();
  std::raise(kStopSignal);
  ASSERT_TRUE(stopRequested());
  const char* argv[] = {"bigbatch", "train", "x.toml", "--workers", "2"};
  const int status =
      launchWorkers(*RankLauncher::named("mpirun"), 2, 1, 5, const_cast<char**>(argv));
  clearStopRequest();
  unsetenv("BIGBATCH_MPIRUN");
  EXPECT_EQ(status, kStoppedExitStatus);
  EXPECT_FALSE(std::filesystem::exists(dir / "calls")) << "the job was started";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace bigbatch
