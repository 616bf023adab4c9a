// Liveness of the ranks while they train: every rank publishes its step and
// phase (compute or exchange) in a shared-memory heartbeat, and under MPI a
// watchdog ends the job when an exchange outlasts comm.timeout_s, naming
// the rank that stopped answering from the heartbeat. Our own collectives
// fail first, at their deadline; the watchdog covers calls that have no
// deadline of their own (MPI's).
//
// Internal to src/train. Construction is collective (every rank builds the
// heartbeat). enter() is called by the training thread; the watchdog's
// callback runs on the watchdog thread and only reads atomics.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/ddp/heartbeat.h"
#include "bigbatch/ddp/stall_watchdog.h"

namespace bigbatch::train_detail {

class StallGuard {
 public:
  StallGuard(Communicator& comm, double timeoutS);
  StallGuard(const StallGuard&) = delete;
  StallGuard& operator=(const StallGuard&) = delete;

  // This rank is now in `phase` of optimizer step `step` (1-based).
  void enter(int64_t step, Heartbeat::Phase phase);
  // For DdpOptions::watchdog; null on one rank or without MPI.
  StallWatchdog* watchdog() { return watchdog_.get(); }

 private:
  Heartbeat heartbeat_;
  std::atomic<int64_t> step_{0};
  std::atomic<int> phase_{Heartbeat::kCompute};
  std::unique_ptr<StallWatchdog> watchdog_;
};

}  // namespace bigbatch::train_detail
