#include "bigbatch/launch/launch_workers.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>

#include "bigbatch/comm/world.h"
#include "bigbatch/common/cpu_affinity.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/stop_request.h"
#include "bigbatch/common/supervision_env.h"
#include "bigbatch/launch/rank_launcher.h"
#include "bigbatch/launch/slurm_requeue.h"
#include "bigbatch/launch/worker_placement.h"
#include "failure_reader.h"
#include "job_process.h"

namespace bigbatch {

std::vector<std::string> mpirunLauncher() {
  const char* value = std::getenv(kMpirunEnv);
  if (value == nullptr) return {"mpirun"};
  std::vector<std::string> words;
  std::istringstream in(value);
  for (std::string w; in >> w;) words.push_back(w);
  BIGBATCH_REQUIRE(!words.empty(), InvalidArgument,
                   "{} is set but empty: give the launcher that starts the ranks (e.g. "
                   "{}=\"mpirun --hostfile hosts\"), or unset it to start them on this machine",
                   kMpirunEnv, kMpirunEnv);
  return words;
}

bool shouldLaunchWorkers(int workers) { return workers > 1 && !launchedByLauncher(); }

int cpusPerRank(int workers, int threadsPerRank, int cpus) {
  const int threads = threadsPerRank > 0 ? threadsPerRank : std::max(1, cpus / workers);
  return static_cast<long long>(workers) * threads <= cpus ? threads : 0;
}

std::string thisBinary() {
  char self[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  BIGBATCH_REQUIRE(len > 0, IoError, "cannot find this binary's path: {}", std::strerror(errno));
  self[len] = '\0';
  return self;
}

std::vector<std::string> workerLaunch(const RankLauncher& launcher, int workers,
                                      int threadsPerRank,
                                      const std::vector<std::string>& trainArgs,
                                      const WorkerPlacement* placement) {
  const int cpus = std::max<int>(1, static_cast<int>(allowedCpus().size()));
  const int pin = launcher.ranksPinThemselves() ? cpusPerRank(workers, threadsPerRank, cpus) : 0;
  std::vector<std::string> program = launcher.program();
  const std::vector<std::string> hosts =
      placement != nullptr ? launcher.hostArguments(*placement) : std::vector<std::string>();
  if (!hosts.empty()) {
    // Ours replace the launcher's host list (a hostfile stays: --host then
    // picks among its hosts).
    std::vector<std::string> kept;
    for (size_t i = 0; i < program.size(); ++i) {
      const std::string& w = program[i];
      if (w == "--host" || w == "-host" || w == "-H") {
        ++i;
      } else if (w.rfind("--host=", 0) != 0 && w.rfind("-host=", 0) != 0) {
        kept.push_back(w);
      }
    }
    program = std::move(kept);
  }
  // What the ranks need, set here and handed to them explicitly below: their
  // CPUs, and what the user's stdout is (their own is the launcher's pipe),
  // so the progress bar is drawn only on a real terminal.
  if (pin > 0) {
    setenv(kCpusPerRankEnv, std::to_string(pin).c_str(), 1);
  } else {
    unsetenv(kCpusPerRankEnv);
  }
  setenv(kStdoutTtyEnv, isatty(STDOUT_FILENO) ? "1" : "0", 1);
  std::vector<std::string> args = program;
  for (const auto& part : {launcher.rankArguments(workers, geteuid() == 0), hosts,
                           launcher.environmentArguments()}) {
    args.insert(args.end(), part.begin(), part.end());
  }
  args.push_back(thisBinary());
  args.insert(args.end(), trainArgs.begin(), trainArgs.end());
  return args;
}

std::vector<std::string> argumentsWithout(int argc, char** argv,
                                          const std::vector<std::string>& withValue,
                                          const std::vector<std::string>& flags) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    bool drop = std::find(flags.begin(), flags.end(), a) != flags.end();
    for (const std::string& option : withValue) {
      if (a == option) {
        ++i;  // and its value
        drop = true;
      } else if (a.rfind(option + "=", 0) == 0) {
        drop = true;
      }
    }
    if (!drop) out.push_back(a);
  }
  return out;
}

namespace {
// The job's process group, for the handler below.
std::atomic<pid_t> jobGroup{0};
std::atomic<bool> stopAsked{false};
void forwardToJob(int signal) {
  if (signal == kStopSignal) stopAsked = true;
  if (const pid_t group = jobGroup.load(); group > 0) kill(-group, signal == SIGHUP ? SIGTERM : signal);
}
}  // namespace

int launchWorkers(const RankLauncher& launcher, int workers, int threadsPerRank, int argc,
                  char** argv) {
  const std::vector<std::string> args = workerLaunch(
      launcher, workers, threadsPerRank, argumentsWithout(argc, argv, {"--workers"}, {}));
  std::fflush(stdout);
  std::fflush(stderr);
  // Signals that end the job go to it (mpirun, in a group of its own, ends
  // its ranks); blocked until the group is known, so none is lost between.
  std::optional<launch_detail::TerminationSignalsBlocked> blocked;
  blocked.emplace();
  struct sigaction forward {};
  forward.sa_handler = forwardToJob;
  sigemptyset(&forward.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, kStopSignal}) sigaction(sig, &forward, nullptr);
  // A stop asked before the launch (while the run's data, model or
  // checkpoint were read, or now, blocked): no job to stop, the newest
  // checkpoint stands. Started, the launcher would get the signal before
  // it can handle it, and die of it.
  sigset_t pending;
  sigemptyset(&pending);
  if (stopRequested() || stopAsked.load() ||  // the handler, run by another thread
      (sigpending(&pending) == 0 && sigismember(&pending, kStopSignal) == 1)) {
    blocked.reset();  // scontrol requeue must not inherit the blocked signals
    return endStoppedJob();
  }
  const launch_detail::JobProcess job = launch_detail::startJobProcess(
      args, blocked->previous(),
      fmt::format("install openmpi-bin (scripts/setup), correct {}, or run with --workers 1",
                  launcher.name() == std::string("srun")
                      ? "run.launcher (srun: inside a Slurm allocation)"
                      : kMpirunEnv));
  launch_detail::FailureReader reader(job.stderrFd);
  jobGroup = job.pid;
  blocked.reset();
  // A stop asked before the job's group was known (bigbatch train armed the
  // request first thing): the job hears of it now.
  if (stopRequested()) stopAsked = true;
  if (stopAsked) kill(-job.pid, kStopSignal);
  int wstatus = 0;
  pid_t waited = -1;
  while ((waited = waitpid(job.pid, &wstatus, 0)) < 0 && errno == EINTR) {
  }
  if (waited < 0) wstatus = 1 << 8;  // the job's status is lost: not a success
  // mpirun's last words, then ours; a rank that outlived mpirun and still
  // holds the pipe does not keep this process waiting past 10 s.
  reader.finish(std::chrono::seconds(10));
  jobGroup = 0;
  const int status = WIFSIGNALED(wstatus) ? 128 + WTERMSIG(wstatus) : WEXITSTATUS(wstatus);
  // Every rank checkpointed at one step and stopped (SIGUSR1): requeued
  // under Slurm. A job that failed while stopping is requeued too (the
  // allocation is ending; the newest checkpoint continues), its cause said.
  if (status == kStoppedExitStatus || (stopAsked && status != 0)) {
    if (status != kStoppedExitStatus) {
      std::fprintf(stderr,
                   "bigbatch: the job failed (exit status %d) while stopping on request%s%s\n",
                   status, reader.reason().empty() ? "" : "; its first error: ",
                   reader.reason().c_str());
    }
    return endStoppedJob();
  }
  if (status != 0 && !reader.reason().empty()) {
    // mpirun's own report (its help text, the lines of an aborting job)
    // comes after the ranks' messages; the cause goes last, where a user
    // looks.
    std::fprintf(stderr, "bigbatch: the job failed (exit status %d); its first error: %s\n",
                 status, reader.reason().c_str());
  }
  return status;
}

void pinLaunchedRank() {
  const char* perRank = std::getenv(kCpusPerRankEnv);
  const char* localRank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (!localRank) localRank = std::getenv("LOCAL_RANK");  // torchrun's
  if (!perRank || !localRank) return;
  const int n = std::atoi(perRank), local = std::atoi(localRank);
  const std::vector<int> cpus = allowedCpus();
  if (n <= 0 || local < 0 || static_cast<size_t>(local + 1) * n > cpus.size()) return;
  pinProcessTo(std::vector<int>(cpus.begin() + local * n, cpus.begin() + (local + 1) * n));
}

}  // namespace bigbatch
