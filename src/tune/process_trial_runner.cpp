#include "bigbatch/tune/process_trial_runner.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bigbatch/common/cpu_affinity.h"
#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

// The process groups of running jobs, for the signal handler.
constexpr int kMaxJobs = 256;
std::atomic<pid_t> gJobGroups[kMaxJobs];

void passSignalOn(int sig) {
  for (auto& g : gJobGroups) {
    const pid_t pg = g.load();
    if (pg > 0) kill(-pg, SIGTERM);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void remember(pid_t pg) {
  for (auto& g : gJobGroups) {
    pid_t empty = 0;
    if (g.compare_exchange_strong(empty, pg)) return;
  }
}

void forget(pid_t pg) {
  for (auto& g : gJobGroups) {
    pid_t mine = pg;
    if (g.compare_exchange_strong(mine, 0)) return;
  }
}

bool holdsCheckpoint(const fs::path& runDir) {
  std::error_code ec;
  const fs::path dir = runDir / "checkpoints";
  if (!fs::is_directory(dir, ec)) return false;
  return fs::directory_iterator(dir, ec) != fs::directory_iterator();
}

// The last line of a job's log that says what went wrong.
std::string lastError(const fs::path& log) {
  std::ifstream in(log);
  std::string line, error, last;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.rfind("bigbatch: error", 0) == 0 || line.rfind("bigbatch: libtorch error", 0) == 0) {
      error = line;
    }
  }
  return error.empty() ? last : error;
}

}  // namespace

ProcessTrialRunner::ProcessTrialRunner(ProcessTrialRunnerOptions options)
    : options_(std::move(options)) {
  BIGBATCH_REQUIRE(options_.slots >= 1, InvalidArgument, "tune: at least one job slot is needed");
  if (options_.slots > 1) {
    const std::vector<int> cpus = allowedCpus();
    const size_t each = cpus.size() / static_cast<size_t>(options_.slots);
    BIGBATCH_REQUIRE(each >= 1, InvalidArgument,
                     "tune: --parallel {} jobs need at least as many CPUs, this process may use "
                     "{} ({}); lower --parallel",
                     options_.slots, cpus.size(), formatCpuList(cpus));
    for (int s = 0; s < options_.slots; ++s) {
      slotCpus_.emplace_back(cpus.begin() + static_cast<long>(s * each),
                             cpus.begin() + static_cast<long>((s + 1) * each));
    }
  }
  fs::create_directories(fs::path(options_.dir) / "logs");
  struct sigaction sa {};
  sa.sa_handler = passSignalOn;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

ProcessTrialRunner::~ProcessTrialRunner() {
  for (const auto& [pid, r] : running_) kill(-pid, SIGTERM);
  for (const auto& [pid, r] : running_) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    forget(pid);
  }
}

std::vector<std::string> ProcessTrialRunner::commandLine(const TrialJob& job, bool resume) const {
  std::vector<std::string> argv = {options_.program, "train", options_.config};
  for (const auto& s : options_.sets) argv.insert(argv.end(), {"--set", s});
  for (const auto& s : job.sets) argv.insert(argv.end(), {"--set", s});
  argv.insert(argv.end(), {"--set", fmt::format("train.stop_after_epoch={}", job.stopAfterEpoch),
                           "--run-dir", (fs::path(options_.dir) / job.name).string()});
  if (resume) argv.insert(argv.end(), {"--resume", "auto"});
  return argv;
}

void ProcessTrialRunner::start(int slot, const TrialJob& job) {
  const fs::path runDir = fs::path(options_.dir) / job.name;
  const bool resume = holdsCheckpoint(runDir);
  // A run directory without a checkpoint holds a run that never got far.
  if (!resume) fs::remove_all(runDir);
  const std::vector<std::string> argv = commandLine(job, resume);
  const fs::path log = fs::path(options_.dir) / "logs" / (job.name + ".log");
  {
    std::ofstream out(log, std::ios::app);
    std::string line = "==";
    for (const auto& a : argv) line += " " + a;
    const std::time_t now = std::time(nullptr);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    out << line << "  (" << stamp << ")\n";
    BIGBATCH_REQUIRE(out.good(), IoError, "cannot write '{}'; check the disk and permissions",
                     log.string());
  }
  // Everything the child needs is prepared before fork().
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const bool pin = !slotCpus_.empty();
  if (pin) {
    for (int c : slotCpus_[static_cast<size_t>(slot)]) CPU_SET(c, &cpus);
  }
  const std::string logPath = log.string();
  const pid_t parent = getpid();
  const pid_t pid = fork();
  BIGBATCH_REQUIRE(pid >= 0, IoError, "tune: cannot start a job ({}); free some processes",
                   std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // the tune killed: its jobs end too
    if (getppid() != parent) _exit(1);
    if (pin) sched_setaffinity(0, sizeof cpus, &cpus);
    const int fd = open(logPath.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    execv(cargv[0], cargv.data());
    const char msg[] = "bigbatch: error: tune could not execute the bigbatch binary\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no race with a signal before the child runs
  remember(pid);
  running_[pid] = Running{slot, job, std::chrono::steady_clock::now()};
}

std::pair<int, TrialOutcome> ProcessTrialRunner::wait() {
  BIGBATCH_REQUIRE(!running_.empty(), InvalidArgument, "tune: wait() with no job running");
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      BIGBATCH_REQUIRE(errno == EINTR, IoError, "tune: waiting for a job failed: {}",
                       std::strerror(errno));
      continue;
    }
    auto it = running_.find(pid);
    if (it == running_.end()) continue;  // not a job of ours
    const Running r = it->second;
    running_.erase(it);
    forget(pid);
    return {r.slot, outcomeOf(r, status)};
  }
}

TrialOutcome ProcessTrialRunner::outcomeOf(const Running& r, int status) const {
  TrialOutcome o;
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
  const fs::path runDir = fs::path(options_.dir) / r.job.name;
  const fs::path log = fs::path(options_.dir) / "logs" / (r.job.name + ".log");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string how = WIFEXITED(status)
                                ? fmt::format("exit status {}", WEXITSTATUS(status))
                                : fmt::format("killed by signal {}", WTERMSIG(status));
    o.error = fmt::format("{} ({}; log: {})", lastError(log), how, log.string());
    return o;
  }
  std::ifstream in(runDir / "summary.json");
  nlohmann::json s;
  try {
    in >> s;
    const bool top5 = s.value("target_metric", std::string("top1")) == "top5";
    o.accuracy = s.at(top5 ? "final_top5" : "final_accuracy").get<double>();
    o.reachedTarget = s.at("reached_target").get<bool>();
    o.timeToTargetS = o.reachedTarget ? s.at("time_to_target_s").get<double>() : 0.0;
    o.epochs = s.at("epochs").get<int64_t>();
    o.complete = !s.at("paused").get<bool>();
    o.ok = true;
  } catch (const std::exception& e) {
    o.error = fmt::format("the run ended but its summary.json is unreadable ({}); log: {}",
                          e.what(), log.string());
  }
  return o;
}

}  // namespace bigbatch
