#include "stall_guard.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace bigbatch::train_detail {

StallGuard::StallGuard(Communicator& comm, double timeoutS) : heartbeat_(comm) {
  if (comm.size() <= 1 || comm.transportName() != "MPI") return;
  const int rank = comm.rank();
  const auto limit = std::chrono::milliseconds(static_cast<int64_t>(timeoutS * 1000.0));
  watchdog_ = std::make_unique<StallWatchdog>(
      limit, [this, rank, timeoutS](const std::string& op, double stuck) {
        const int64_t step = step_.load();
        const std::string who =
            heartbeat_.describeLaggards(step, static_cast<Heartbeat::Phase>(phase_.load()));
        std::fprintf(stderr,
                     "bigbatch: error: [rank %d] stall watchdog: %s at step %lld has not "
                     "finished after %.1f s (comm.timeout_s = %g): stopped answering: %s; "
                     "ending the job\n",
                     rank, op.c_str(), static_cast<long long>(step), stuck, timeoutS, who.c_str());
        std::fflush(stderr);
        std::_Exit(1);  // mpirun then ends every rank
      });
}

void StallGuard::enter(int64_t step, Heartbeat::Phase phase) {
  step_.store(step);
  phase_.store(phase);
  heartbeat_.beat(step, phase);
}

}  // namespace bigbatch::train_detail
