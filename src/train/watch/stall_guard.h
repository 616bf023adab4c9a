// Liveness of the ranks while they train: every rank publishes its step and
// phase (compute or exchange) and a pulse in a shared-memory heartbeat, and
// under MPI a watchdog ends the job when an exchange outlasts its limit,
// naming the rank that stopped answering from the heartbeat.
//
// Our own collectives wait with comm.timeout_s as their deadline and fail
// first, with their named error (the trainer adds diagnose() to it). The
// watchdog's limit is that deadline plus a margin (watchdogLimitS): it
// covers calls that have no deadline of their own (MPI's), and before it
// ends the process it calls `beforeExit` (the trainer writes the MLPerf
// run_stop line there).
//
// Internal to src/train. Construction is collective (every rank builds the
// heartbeat). enter() is called by the training thread; diagnose() from any
// thread; the watchdog's callbacks run on the watchdog thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/ddp/heartbeat.h"
#include "bigbatch/ddp/stall_watchdog.h"

namespace bigbatch::train_detail {

// The watchdog's limit for a collective deadline of `timeoutS`: a quarter
// more, and at least 5 s more, so that a collective whose peer stopped has
// failed on its own deadline (and told the others) well before.
double watchdogLimitS(double timeoutS);

// Whether the heartbeat can tell who is to blame for `e`: a peer that did
// not answer by its deadline (TimeoutError), or one that went away under an
// asynchronous collective (PeerError: NCCL's error when a remote rank is
// gone). The trainer then appends diagnose() to the message.
bool blamesAPeer(const std::exception& e);

class StallGuard {
 public:
  StallGuard(Communicator& comm, double timeoutS, std::function<void()> beforeExit = nullptr);
  StallGuard(const StallGuard&) = delete;
  StallGuard& operator=(const StallGuard&) = delete;

  // This rank is now in `phase` of optimizer step `step` (1-based).
  void enter(int64_t step, Heartbeat::Phase phase);
  // "stopped answering: rank 2 (no sign of life for ...)": the ranks of
  // this host that look stalled at this rank's step and phase, or why none
  // can be named (Heartbeat::describeLaggards).
  std::string diagnose() const;
  // For DdpOptions::watchdog; null on one rank or without MPI.
  StallWatchdog* watchdog() { return watchdog_.get(); }

 private:
  Heartbeat heartbeat_;
  std::atomic<int64_t> step_{0};
  std::atomic<int> phase_{Heartbeat::kCompute};
  std::unique_ptr<StallWatchdog> watchdog_;
};

}  // namespace bigbatch::train_detail
