#include "bigbatch/launch/supervise_workers.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include "bigbatch/ckpt/atomic_file.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/process_start.h"
#include "bigbatch/common/rank_placement.h"
#include "bigbatch/common/stop_request.h"
#include "bigbatch/common/supervision_env.h"
#include "bigbatch/launch/job_mlperf_log.h"
#include "bigbatch/launch/launch_workers.h"
#include "bigbatch/launch/rank_launcher.h"
#include "bigbatch/launch/slurm_requeue.h"
#include "bigbatch/launch/worker_placement.h"
#include "failure_reader.h"
#include "job_process.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The process group of the running attempt, for the signal handler.
std::atomic<pid_t> runningGroup{0};
std::atomic<int> interruptedBy{0};
std::atomic<bool> stopAsked{false};

// SIGINT, SIGTERM and SIGHUP (the terminal gone) end the job without a
// restart. The job gets SIGTERM for a SIGHUP: its processes are in a
// process group of their own, which the terminal's hang-up does not reach.
// SIGUSR1 asks the job to stop at a checkpoint (common/stop_request.h):
// passed on (mpirun and srun pass it to the ranks), and no attempt follows.
void forwardToJob(int signal) {
  if (signal == kStopSignal) {
    stopAsked = true;
  } else {
    interruptedBy = signal;
  }
  if (const pid_t group = runningGroup.load(); group > 0) {
    kill(-group, signal == SIGHUP ? SIGTERM : signal);
  }
}

// "HOST:PID:START" of this process (supervision_env.h, kSupervisorEnv).
std::string supervisorIdentity() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return fmt::format("{}:{}:{}", host, getpid(), processStartTime(getpid()));
}

struct Failure {
  int attempt = 0;          // 1-based
  int workers = 0;          // the attempt's world size
  std::string cause;        // "exit status 137 (a process ended by signal 9: Killed)"
  int rank = -1;            // the rank the job's messages named first; -1: none
  std::string host;         // where mpirun saw it end, when it says
  std::string reason;       // the first error line of the attempt ("bigbatch: error: ...")
  int status = 0;           // the exit status, or 128 + the signal
  double seconds = 0;       // into the attempt
  int64_t failedAtStep = -1;  // the last step the attempt finished (rank 0); -1: unknown
  int64_t resumeStep = -1;  // the checkpoint the next attempt starts from; -1: the start
  int64_t endedAtMs = 0;    // when the attempt's last process was gone (Unix ms)
};

int64_t unixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// mpirun exits with 128 + N when one of its processes ended on signal N.
std::string describeStatus(int wstatus, int& status) {
  if (WIFSIGNALED(wstatus)) {
    status = 128 + WTERMSIG(wstatus);
    return fmt::format("mpirun killed by signal {} ({})", WTERMSIG(wstatus),
                       strsignal(WTERMSIG(wstatus)));
  }
  status = WEXITSTATUS(wstatus);
  if (status > 128 && status < 128 + 65) {
    return fmt::format("exit status {} (a process ended by signal {}: {})", status, status - 128,
                       strsignal(status - 128));
  }
  return fmt::format("exit status {}", status);
}

// The step of the checkpoint `latest` names (ckpt-<step>.pt); -1 when none.
int64_t newestCheckpointStep(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "latest");
  std::string name;
  if (!(in >> name)) return -1;
  const size_t dash = name.rfind('-'), dot = name.rfind('.');
  if (dash == std::string::npos || dot == std::string::npos || dot < dash) return -1;
  try {
    return std::stoll(name.substr(dash + 1, dot - dash - 1));
  } catch (const std::exception&) {
    return -1;
  }
}

// The processes descended from this one (its children, theirs, ...), read
// from /proc.
std::vector<pid_t> descendants() {
  std::vector<std::pair<pid_t, pid_t>> parentOf;  // (pid, ppid)
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    const size_t close = stat.rfind(')');  // after the command name, which may hold spaces
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = 0;
    long ppid = 0;
    if (rest >> state >> ppid) parentOf.emplace_back(std::stoi(name), static_cast<pid_t>(ppid));
  }
  std::vector<pid_t> out = {getpid()};
  for (size_t i = 0; i < out.size(); ++i) {
    for (const auto& [pid, ppid] : parentOf) {
      if (ppid == out[i]) out.push_back(pid);
    }
  }
  out.erase(out.begin());
  return out;
}

// Every process of the attempt gone. mpirun gives its launch agents and
// every rank a process group of their own, and may exit before a remote
// daemon has ended its ranks, so neither its exit nor a kill of its group
// is enough: this process is a child subreaper (superviseWorkers), so what
// the attempt started stays its descendant when a parent dies. SIGKILL to
// the group and to every descendant, and reap, until none is left (up to
// 10 s).
void endAttempt(pid_t group) {
  kill(-group, SIGKILL);
  for (int i = 0; i < 1000; ++i) {
    for (const pid_t pid : descendants()) kill(pid, SIGKILL);
    int status = 0;
    pid_t reaped = 0;
    while ((reaped = waitpid(-1, &status, WNOHANG)) > 0) {
    }
    if (reaped < 0 && errno == ECHILD) return;  // no child left, so no descendant
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Starts mpirun for one attempt in a new process group and waits for it;
// what its messages say about a failure goes into `f`. nullopt, starting
// nothing, when a termination signal has come (interruptedBy).
std::optional<int> runAttempt(const std::vector<std::string>& command, int workers, Failure& f) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::optional<launch_detail::TerminationSignalsBlocked> blocked;
  blocked.emplace();
  if (interruptedBy != 0) return std::nullopt;
  // The job does not outlive its supervisor (a SIGKILL, the OOM killer):
  // mpirun gets SIGTERM when this process is gone, and ends the ranks it
  // started (the ranks also watch the supervisor themselves:
  // src/train/watch/supervisor_watch.h).
  const launch_detail::JobProcess job = launch_detail::startJobProcess(
      command, blocked->previous(),
      fmt::format("install openmpi-bin (scripts/setup) or correct {} to start {} workers",
                  kMpirunEnv, workers));
  const pid_t child = job.pid;
  launch_detail::FailureReader reader(job.stderrFd);
  runningGroup = child;
  blocked.reset();  // a signal that came meanwhile is delivered now, and forwarded
  // A stop asked just before the group was known (the handler had no one
  // to tell): the attempt hears of it now.
  if (stopAsked) kill(-child, kStopSignal);
  int wstatus = 0;
  pid_t waited = -1;
  while ((waited = waitpid(child, &wstatus, 0)) < 0 && errno == EINTR) {
  }
  // A status that cannot be had (ECHILD: something reaped it) is a
  // failure, as for launchWorkers: never a success that was not seen.
  if (waited < 0) wstatus = 1 << 8;
  endAttempt(child);
  runningGroup = 0;
  reader.finish();
  f.rank = reader.rank();
  f.host = reader.host();
  f.reason = reader.reason();
  return wstatus;
}

// The step the attempt's rank 0 last wrote to `path` (step_marker.h);
// -1 when it wrote none.
int64_t lastStepIn(const fs::path& path) {
  std::ifstream in(path);
  long long step = -1;
  if (!(in >> step)) return -1;
  return step;
}

// The newest failure and the one before it, in consecutive attempts on
// the same world, name the same rank: restarting did not bring it back.
bool workerIsLost(const std::vector<Failure>& failures) {
  if (failures.size() < 2) return false;
  const Failure& now = failures.back();
  const Failure& before = failures[failures.size() - 2];
  return now.rank >= 0 && now.rank == before.rank && now.workers == before.workers &&
         now.attempt == before.attempt + 1;
}

// The time_ms of the MLPerf run_start among an attempt's log lines; 0: none
// (the attempt failed before training started).
int64_t runStartMs(const std::vector<std::string>& lines) {
  static const std::regex runStart(
      R"("time_ms": (\d+), "event_type": "INTERVAL_START", "key": "run_start")");
  std::smatch m;
  for (const std::string& line : lines) {
    if (std::regex_search(line, m, runStart)) return std::stoll(m[1]);
  }
  return 0;
}

// The attempt's mlperf.log, moved aside to mlperf.log.<n> (the first free
// n) for joinAttemptLogs; no lines when it wrote none.
AttemptLog takeAttemptLog(const std::string& runDir) {
  AttemptLog a;
  const fs::path log = fs::path(runDir) / "mlperf.log";
  std::ifstream in(log);
  if (!in) return a;
  for (std::string line; std::getline(in, line);) a.lines.push_back(line);
  in.close();
  int n = 1;
  while (fs::exists(fs::path(runDir) / fmt::format("mlperf.log.{}", n))) ++n;
  std::error_code ignored;
  fs::rename(log, fs::path(runDir) / fmt::format("mlperf.log.{}", n), ignored);
  return a;
}

// RUN_DIR/mlperf.log: the attempts' logs joined (job_mlperf_log.h).
void writeJobLog(const std::string& runDir, const std::vector<AttemptLog>& attempts) {
  std::string text;
  for (const std::string& line : joinAttemptLogs(attempts)) text += line + "\n";
  if (text.empty()) return;
  writeFileAtomically((fs::path(runDir) / "mlperf.log").string(), text.data(), text.size());
}

// "exit status 1, rank 1 on h1: bigbatch: error: [rank 1] ..."
std::string describe(const Failure& f) {
  std::string out = f.cause;
  if (f.rank >= 0) out += fmt::format(", rank {}", f.rank);
  if (!f.host.empty()) out += " on " + f.host;
  if (!f.reason.empty()) out += ": " + f.reason;
  return out;
}

nlohmann::ordered_json failuresJson(const std::vector<Failure>& failures) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Failure& f : failures) {
    nlohmann::ordered_json j;
    j["attempt"] = f.attempt;
    j["workers"] = f.workers;
    j["cause"] = f.cause;
    j["rank"] = f.rank;
    j["host"] = f.host;
    j["reason"] = f.reason;
    j["exit_status"] = f.status;
    j["seconds"] = f.seconds;
    j["failed_at_step"] = f.failedAtStep;
    j["resumed_from_step"] = f.resumeStep;
    // The work the failure cost: steps done since the checkpoint resumed from.
    j["steps_lost"] = f.failedAtStep < 0 ? -1 : f.failedAtStep - std::max<int64_t>(f.resumeStep, 0);
    j["ended_at_unix_ms"] = f.endedAtMs;
    list.push_back(j);
  }
  return list;
}

void writeJsonFile(const fs::path& path, const nlohmann::ordered_json& value) {
  const std::string text = value.dump(2) + "\n";
  writeFileAtomically(path.string(), text.data(), text.size());
}

// summary.json of the run that finished gains the list of failures.
void addRestartsToSummary(const std::string& runDir, const std::vector<Failure>& failures) {
  const fs::path path = fs::path(runDir) / "summary.json";
  std::ifstream in(path);
  if (!in) return;
  nlohmann::ordered_json summary = nlohmann::ordered_json::parse(in, nullptr, false);
  if (summary.is_discarded()) return;
  summary["restarts"] = failuresJson(failures);
  writeJsonFile(path, summary);
}

// This attempt's arguments: the user's, with the run directory fixed, and
// after a failure `--resume auto` (or a fresh start when no checkpoint was
// written yet).
std::vector<std::string> attemptArguments(int argc, char** argv, const SupervisorSettings& s,
                                          int attempt, bool fromCheckpoint, int world) {
  std::vector<std::string> dropped = {"--workers", "--max-restarts", "--min-workers", "--run-dir"};
  std::vector<std::string> flags;
  if (attempt > 1) {
    dropped.push_back("--resume");
    if (fromCheckpoint) dropped.push_back("--init-from");  // the checkpoint holds the weights
    flags.push_back("--overwrite");
  }
  std::vector<std::string> args = argumentsWithout(argc, argv, dropped, flags);
  if (attempt > 1 && fromCheckpoint) args.insert(args.end(), {"--resume", "auto"});
  if (attempt > 1 && !fromCheckpoint) args.push_back("--overwrite");
  args.insert(args.end(), {"--run-dir", s.runDir});
  // Fewer workers: the same global batch (a resume sets this itself from
  // the checkpoint; a fresh start needs it said).
  if (world != s.workers) {
    args.insert(args.end(),
                {"--set", fmt::format("train.accumulation_steps={}", accumulationFor(s, world))});
  }
  return args;
}

// --min-workers, or the whole world when it is 0 (never fewer).
int fewestWorkers(const SupervisorSettings& s) {
  return s.minWorkers > 0 ? s.minWorkers : s.workers;
}

}  // namespace

int failedRankIn(const std::string& line) {
  static const std::regex blamed(R"(\] rank (\d+) failed|stopped answering: rank (\d+))");
  static const std::regex writer(R"(\[rank (\d+)\])");
  std::smatch m;
  if (std::regex_search(line, m, blamed)) return std::stoi(m[1].matched ? m[1] : m[2]);
  if (std::regex_search(line, m, writer)) return std::stoi(m[1]);
  return -1;
}

int64_t accumulationFor(const SupervisorSettings& s, int world) {
  return s.globalBatch / (s.batchPerRank * world);
}

void checkWorldsKeepBatch(const SupervisorSettings& s) {
  const int minWorkers = fewestWorkers(s);
  BIGBATCH_REQUIRE(minWorkers <= s.workers, InvalidArgument,
                   "--min-workers {} is above --workers {}: the job cannot grow; give "
                   "--min-workers at most {}",
                   minWorkers, s.workers, s.workers);
  for (int world = s.workers - 1; world >= minWorkers; --world) {
    BIGBATCH_REQUIRE(
        s.globalBatch % (s.batchPerRank * world) == 0, InvalidArgument,
        "--min-workers {}: on {} worker(s) the global batch {} is not a multiple of {} x "
        "train.batch_size {} = {}, so losing a worker would change the recipe; give a "
        "--min-workers above {}, or a global batch that every world from {} to {} workers "
        "divides (e.g. train.batch_size 32 with train.accumulation_steps 2 on 3 workers: 192)",
        minWorkers, world, s.globalBatch, world, s.batchPerRank, world * s.batchPerRank, world,
        minWorkers, s.workers);
  }
}

// What superviseWorkers changes in its process, put back when it returns
// (a second supervision in one process — a test — starts as the first did).
class SupervisionScope {
 public:
  SupervisionScope() {
    interruptedBy = 0;
    // A SIGUSR1 that came while the job was being checked, before this
    // supervision's handler: bigbatch train armed the request first thing.
    stopAsked = stopRequested();
    prctl(PR_GET_CHILD_SUBREAPER, &wasSubreaper_);
    // Orphans of an attempt (a rank whose daemon died first) become this
    // process's children instead of init's, for endAttempt to end and reap.
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    struct sigaction forward {};
    forward.sa_handler = forwardToJob;
    sigemptyset(&forward.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &forward, &previous_[i]);
  }
  ~SupervisionScope() {
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &previous_[i], nullptr);
    prctl(PR_SET_CHILD_SUBREAPER, wasSubreaper_);
    // Every variable the supervision set: a second supervision in this
    // process starts as the first did (its own clock, every slot).
    for (const char* name : {kSupervisorEnv, kStepFileEnv, kRestartCountEnv, kSlotsEnv,
                             kJobRunStartEnv, kPlacementFileEnv}) {
      unsetenv(name);
    }
  }
  SupervisionScope(const SupervisionScope&) = delete;
  SupervisionScope& operator=(const SupervisionScope&) = delete;

 private:
  static constexpr std::array<int, 4> kSignals = {SIGINT, SIGTERM, SIGHUP, kStopSignal};
  int wasSubreaper_ = 0;
  std::array<struct sigaction, 4> previous_{};
};

int superviseWorkers(const SupervisorSettings& s, int argc, char** argv) {
  const SupervisionScope scope;
  const std::unique_ptr<RankLauncher> launcher = RankLauncher::named(s.launcher);
  const std::string identity = supervisorIdentity();
  setenv(kSupervisorEnv, identity.c_str(), 1);
  // Rank 0 checks it sees this run directory (src/train/run/run_start.cpp):
  // where it does not, nothing the supervisor reads there would be the run's.
  fs::create_directories(s.runDir);
  const std::string token = identity + "\n";
  const fs::path tokenFile = fs::path(s.runDir) / ".supervisor";
  writeFileAtomically(tokenFile.string(), token.data(), token.size());
  struct RemovedAtTheEnd {
    fs::path path;
    ~RemovedAtTheEnd() {
      std::error_code ignored;
      fs::remove(path, ignored);
    }
  } tokenGuard{tokenFile};
  // Where the workers run, to leave a lost one's slot out (worker_placement.h):
  // the launcher's hosts, and where each rank of an attempt said it ran.
  std::string unplaced;
  std::optional<WorkerPlacement> placement =
      WorkerPlacement::forLauncher(launcher->program(), s.workers, &unplaced);
  unsetenv(kSlotsEnv);
  unsetenv(kJobRunStartEnv);
  const fs::path placementFile = fs::path(s.runDir) / ".supervisor_placement.json";
  setenv(kPlacementFileEnv, placementFile.c_str(), 1);

  std::vector<Failure> failures;
  std::vector<AttemptLog> attemptLogs;  // once an attempt has failed
  bool fromCheckpoint = false;
  int world = s.workers;
  const int minWorkers = fewestWorkers(s);
  // What every attempt's workers read: which attempt they are (fault.attempts),
  // where rank 0 marks its steps.
  const fs::path stepFile = fs::path(s.runDir) / ".supervisor_step";
  setenv(kStepFileEnv, stepFile.c_str(), 1);
  // The files an attempt's ranks write for this process, gone with it.
  const auto removeAttemptFiles = [&] {
    std::error_code ignored;
    fs::remove(stepFile, ignored);
    fs::remove(placementFile, ignored);
  };
  for (int attempt = 1;; ++attempt) {
    setenv(kRestartCountEnv, std::to_string(attempt - 1).c_str(), 1);
    removeAttemptFiles();
    const auto command = workerLaunch(
        *launcher, world, s.threadsPerRank,
        attemptArguments(argc, argv, s, attempt, fromCheckpoint, world),
        placement && placement->dropped() ? &*placement : nullptr);
    if (attempt > 1 && s.betweenAttempts) s.betweenAttempts(attempt);
    if (stopAsked) {  // between two attempts: nothing to stop, the newest checkpoint stands
      removeAttemptFiles();
      writeJobLog(s.runDir, attemptLogs);
      return endStoppedJob();
    }
    const auto start = Clock::now();
    Failure f;
    const std::optional<int> started = runAttempt(command, world, f);
    if (!started) {
      std::fprintf(stderr, "bigbatch: interrupted (signal %d) before attempt %d; not restarting\n",
                   interruptedBy.load(), attempt);
      removeAttemptFiles();
      writeJobLog(s.runDir, attemptLogs);
      return 128 + interruptedBy.load();
    }
    int wstatus = *started;
    // A launcher that says 0 for a job that never ran (srun when its step
    // could not be launched) must not end the job as done: a finished run
    // leaves summary.json (rank 0, at its end).
    const bool unfinished = WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0 &&
                            !fs::exists(fs::path(s.runDir) / "summary.json");
    if (unfinished) wstatus = 1 << 8;
    f.attempt = attempt;
    f.workers = world;
    f.cause = unfinished ? "the launcher exited 0, but the run wrote no summary.json: it did not "
                           "finish (its ranks never started, or they ended early)"
                         : describeStatus(wstatus, f.status);
    if (unfinished) f.status = 1;
    f.failedAtStep = lastStepIn(stepFile);
    // Stopped on request (SIGUSR1 to this process, or to the ranks): no
    // restart here — the allocation is about to end; the job is requeued
    // and continues from the newest checkpoint. A run that finished all the
    // same (the stop came in its last steps) is done, not requeued.
    if (f.status == kStoppedExitStatus || (stopAsked && f.status != 0)) {
      removeAttemptFiles();
      if (f.status != kStoppedExitStatus) {  // it failed while stopping: say so, keep it
        f.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        f.endedAtMs = unixMs();
        failures.push_back(f);
        std::fprintf(stderr, "bigbatch: attempt %d failed (%s) while stopping on request\n",
                     attempt, describe(f).c_str());
      }
      attemptLogs.push_back(takeAttemptLog(s.runDir));
      writeJobLog(s.runDir, attemptLogs);
      if (!failures.empty()) {
        writeJsonFile(fs::path(s.runDir) / "restarts.json", failuresJson(failures));
      }
      return endStoppedJob();
    }
    if (f.status == 0) {
      removeAttemptFiles();
      if (!failures.empty()) {
        attemptLogs.push_back(takeAttemptLog(s.runDir));
        writeJobLog(s.runDir, attemptLogs);
        addRestartsToSummary(s.runDir, failures);
        std::fprintf(stderr, "bigbatch: the job finished after %zu restart(s)\n", failures.size());
      }
      return 0;
    }
    if (interruptedBy != 0) {
      std::fprintf(stderr, "bigbatch: interrupted (signal %d); not restarting\n",
                   interruptedBy.load());
      removeAttemptFiles();
      return 128 + interruptedBy.load();  // ended by that signal, as a shell reports it
    }
    f.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    f.endedAtMs = unixMs();
    AttemptLog log = takeAttemptLog(s.runDir);
    // The job's time-to-train clock runs from the first run_start on, across
    // the restarts, as the user's wall clock does (the next attempts read it).
    if (std::getenv(kJobRunStartEnv) == nullptr) {
      if (const int64_t ms = runStartMs(log.lines); ms > 0) {
        setenv(kJobRunStartEnv, std::to_string(ms).c_str(), 1);
      }
    }
    f.resumeStep = newestCheckpointStep(s.checkpointDir);
    fromCheckpoint = f.resumeStep >= 0;
    failures.push_back(f);
    log.failed = true;
    log.endedAtMs = f.endedAtMs;
    log.cause = describe(f);
    log.rank = f.rank;
    log.resumedFromStep = f.resumeStep;
    attemptLogs.push_back(std::move(log));
    fs::create_directories(s.runDir);
    writeJsonFile(fs::path(s.runDir) / "restarts.json", failuresJson(failures));
    if (attempt > s.maxRestarts) break;
    if (interruptedBy != 0) {  // between the attempt's end and here
      std::fprintf(stderr, "bigbatch: interrupted (signal %d); not restarting\n",
                   interruptedBy.load());
      removeAttemptFiles();
      writeJobLog(s.runDir, attemptLogs);
      return 128 + interruptedBy.load();
    }
    if (workerIsLost(failures) && world > minWorkers) {
      --world;
      std::fprintf(stderr,
                   "bigbatch: rank %d failed again right after its restart: it is taken as lost; "
                   "the job goes on with %d of %d workers (--min-workers %d), global batch %lld "
                   "kept with %lld accumulation step(s) of %lld per rank\n",
                   f.rank, world, s.workers, minWorkers, static_cast<long long>(s.globalBatch),
                   static_cast<long long>(accumulationFor(s, world)),
                   static_cast<long long>(s.batchPerRank));
      // Not the highest rank: the lost one's own place (its GPU, its host),
      // as the attempt's ranks reported it.
      const std::vector<RankPlace> places = readRankPlacement(placementFile.string());
      if (!placement && !places.empty()) placement = WorkerPlacement::fromReports(places);
      if (placement) {
        const std::string where = placement->drop(f.rank, places);
        setenv(kSlotsEnv, placement->slotPlan().c_str(), 1);
        std::string next;
        for (const auto& w : launcher->hostArguments(*placement)) {
          next += (next.empty() ? "" : " ") + w;
        }
        std::fprintf(stderr, "bigbatch: left out: %s%s%s\n", where.c_str(),
                     next.empty() ? "" : "; the next attempts run with ", next.c_str());
      } else {
        std::fprintf(stderr,
                     "bigbatch: warning: rank %d's place cannot be left out (%s, and the "
                     "attempt failed before its ranks said where they ran): the next attempt "
                     "takes the first %d slots, which may include it; give the launcher a "
                     "hostfile with slots=N (BIGBATCH_MPIRUN)\n",
                     f.rank, unplaced.c_str(), world);
      }
    }
    const std::string from = fromCheckpoint
                                 ? fmt::format("the checkpoint of step {}", f.resumeStep)
                                 : std::string("the start (no checkpoint was written yet)");
    std::fprintf(stderr,
                 "bigbatch: attempt %d failed (%s) after %.1f s; every process of it is gone; "
                 "restart %d of %d from %s\n",
                 attempt, describe(f).c_str(), f.seconds, attempt, s.maxRestarts, from.c_str());
  }
  removeAttemptFiles();
  writeJobLog(s.runDir, attemptLogs);
  std::fprintf(stderr,
               "bigbatch: error: the job failed %zu time(s), giving up after %d restart(s) "
               "(--max-restarts):\n",
               failures.size(), s.maxRestarts);
  for (const Failure& f : failures) {
    std::fprintf(stderr, "  attempt %d: %s after %.1f s\n", f.attempt, describe(f).c_str(),
                 f.seconds);
  }
  return 1;
}

}  // namespace bigbatch
