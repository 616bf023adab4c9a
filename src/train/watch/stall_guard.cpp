#include "watch/stall_guard.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bigbatch/common/error.h"

namespace bigbatch::train_detail {

double watchdogLimitS(double timeoutS) { return timeoutS + std::max(5.0, 0.25 * timeoutS); }

StallGuard::StallGuard(Communicator& comm, double timeoutS, std::function<void()> beforeExit)
    : heartbeat_(comm) {
  if (comm.size() <= 1 || comm.transportName() != "MPI") return;
  const int rank = comm.rank();
  const double limitS = watchdogLimitS(timeoutS);
  const auto limit = std::chrono::milliseconds(static_cast<int64_t>(limitS * 1000.0));
  watchdog_ = std::make_unique<StallWatchdog>(
      limit,
      [this, rank, timeoutS, beforeExit](const std::string& op, double stuck) {
        std::fprintf(stderr,
                     "bigbatch: error: [rank %d] stall watchdog: %s at step %lld has not "
                     "finished after %.1f s (comm.timeout_s = %g, a call without a deadline of "
                     "its own): %s; ending the job\n",
                     rank, op.c_str(), static_cast<long long>(step_.load()), stuck, timeoutS,
                     diagnose().c_str());
        std::fflush(stderr);
        if (beforeExit) beforeExit();
        std::_Exit(1);  // mpirun then ends every rank
      },
      [this] { heartbeat_.pulse(); });
}

void StallGuard::enter(int64_t step, Heartbeat::Phase phase) {
  step_.store(step);
  phase_.store(phase);
  heartbeat_.beat(step, phase);
}

bool blamesAPeer(const std::exception& e) {
  return dynamic_cast<const TimeoutError*>(&e) != nullptr ||
         dynamic_cast<const PeerError*>(&e) != nullptr;
}

std::string StallGuard::diagnose() const {
  return heartbeat_.describeLaggards(step_.load(), static_cast<Heartbeat::Phase>(phase_.load()));
}

}  // namespace bigbatch::train_detail
