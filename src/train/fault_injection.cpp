#include "fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <utility>

#include "bigbatch/common/error.h"
#include "bigbatch/train/supervision_env.h"

namespace bigbatch::train_detail {
namespace {

int64_t restartCount() {
  const char* value = std::getenv(kRestartCountEnv);
  return value ? std::atoll(value) : 0;
}

}  // namespace

FaultInjector::FaultInjector(FaultPlan plan, int rank)
    : plan_(std::move(plan)),
      rank_(rank),
      armed_(plan_.kind != "none" && rank == plan_.rank &&
             (plan_.attempts == 0 || restartCount() < plan_.attempts)) {
  BIGBATCH_REQUIRE((plan_.kind != "nan" && plan_.kind != "nan_input") || plan_.during == "step",
                   InvalidArgument,
                   "fault.kind = {} with fault.during = {}: a NaN loss or batch is injected only "
                   "into a step; set fault.during = \"step\"",
                   plan_.kind, plan_.during);
}

bool FaultInjector::due(const char* site, int64_t step) {
  if (!armed_ || plan_.during != site) return false;
  const bool atStep = plan_.during == "step" || plan_.during == "exchange";
  if (atStep ? step != plan_.step : step < plan_.step) return false;
  armed_ = false;
  return true;
}

void FaultInjector::inject(const char* site, int64_t step) {
  std::fprintf(stderr, "bigbatch: injecting fault '%s' on rank %d at step %lld (during %s)\n",
               plan_.kind.c_str(), rank_, static_cast<long long>(step), site);
  std::fflush(stderr);
  const std::string& kind = plan_.kind;
  if (kind == "nan" || kind == "nan_input") return;
  if (kind == "abort") std::abort();
  if (kind == "sigkill") std::raise(SIGKILL);
  if (kind == "hang") {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  BIGBATCH_THROW(Error, "injected fault (fault.kind = throw) on rank {} at step {} (during {})",
                 rank_, step, site);
}

}  // namespace bigbatch::train_detail
