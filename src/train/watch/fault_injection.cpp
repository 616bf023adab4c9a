#include "watch/fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "bigbatch/common/error.h"
#include "bigbatch/common/supervision_env.h"

namespace bigbatch::train_detail {
namespace {

// The attempt: bigbatch's supervisor counts them, or torchrun's agent
// (its --max_restarts) does.
int64_t restartCount() {
  const char* value = std::getenv(kRestartCountEnv);
  if (value == nullptr) value = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return value ? std::atoll(value) : 0;
}

// Whether the plan names this process: by host and/or slot when either is
// given, else by rank.
bool targets(const FaultPlan& plan, const FaultInjector::Placement& here) {
  if (plan.host.empty() && plan.slot < 0) return plan.rank < 0 || here.rank == plan.rank;
  return (plan.host.empty() || plan.host == here.host) && (plan.slot < 0 || plan.slot == here.slot);
}

}  // namespace

FaultInjector::FaultInjector(FaultPlan plan, Placement here)
    : plan_(std::move(plan)),
      here_(std::move(here)),
      armed_(plan_.kind != "none" && targets(plan_, here_) &&
             (plan_.attempts == 0 || restartCount() < plan_.attempts)) {
  BIGBATCH_REQUIRE((plan_.kind != "nan" && plan_.kind != "nan_input") || plan_.during == "step",
                   InvalidArgument,
                   "fault.kind = {} with fault.during = {}: a NaN loss or batch is injected only "
                   "into a step; set fault.during = \"step\"",
                   plan_.kind, plan_.during);
  BIGBATCH_REQUIRE(plan_.kind != "pause" || (plan_.during == "step" && !plan_.pauseDir.empty()),
                   InvalidArgument,
                   "fault.kind = pause needs fault.during = \"step\" and fault.pause_dir (where "
                   "a paused rank writes paused-rank-<rank> and waits until it is removed)");
}

// A state the job reports and a test waits for: the marker file exists
// while this rank is stopped here, alive (its heartbeat pulses) and in no
// collective; removing it lets the step go on.
void FaultInjector::pauseUntilReleased(int64_t step) const {
  const std::filesystem::path marker =
      std::filesystem::path(plan_.pauseDir) / ("paused-rank-" + std::to_string(here_.rank));
  {
    std::ofstream out(marker);
    out << "step " << step << "\n";
    BIGBATCH_REQUIRE(out.good(), IoError,
                     "fault.kind = pause: cannot write '{}'; give fault.pause_dir a directory "
                     "this rank can write",
                     marker.string());
  }
  std::fprintf(stderr, "bigbatch: rank %d paused at step %lld until %s is removed\n", here_.rank,
               static_cast<long long>(step), marker.c_str());
  std::fflush(stderr);
  while (std::filesystem::exists(marker)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool FaultInjector::due(const char* site, int64_t step) {
  if (!armed_ || plan_.during != site) return false;
  const bool atStep = plan_.during == "step" || plan_.during == "exchange";
  if (atStep ? step != plan_.step : step < plan_.step) return false;
  armed_ = false;
  return true;
}

void FaultInjector::inject(const char* site, int64_t step) {
  std::fprintf(stderr,
               "bigbatch: injecting fault '%s' on rank %d at step %lld (during %s; slot %d of "
               "%s)\n",
               plan_.kind.c_str(), here_.rank, static_cast<long long>(step), site, here_.slot,
               here_.host.c_str());
  std::fflush(stderr);
  const std::string& kind = plan_.kind;
  if (kind == "nan" || kind == "nan_input") return;
  if (kind == "abort") std::abort();
  if (kind == "sigkill") std::raise(SIGKILL);
  if (kind == "hang") {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (kind == "pause") {
    pauseUntilReleased(step);
    return;
  }
  BIGBATCH_THROW(Error, "injected fault (fault.kind = throw) on rank {} at step {} (during {})",
                 here_.rank, step, site);
}

}  // namespace bigbatch::train_detail
