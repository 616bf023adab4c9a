// Heartbeat: each rank's progress (its global rank, the step and phase it is
// in and since when) and a pulse that says the process still runs, in a
// table in this host's shared memory, readable without MPI. When a
// collective stalls, the survivors read the table to name the rank that
// stopped — MPI itself cannot say which peer a blocked MPI_Allreduce waits
// for: a rank whose pulse stopped (a stopped or frozen process, whatever
// step it reached), or one that never reached the survivors' step.
//
// Threading: beat() from the compute thread; pulse() from a thread that
// runs as long as the process does (the stall watchdog's, every tick);
// describeLaggards() from any thread. Construction is collective over the
// host's ranks.
#pragma once

#include <cstdint>
#include <string>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

class Heartbeat {
 public:
  // Allocates the table on comm's host ranks; without shared memory (or on
  // one rank) it is inert and describeLaggards() says so. A rank whose
  // pulses had started and whose last pulse is older than `silentAfterS`
  // counts as not running (the watchdog pulses every 0.2 s).
  explicit Heartbeat(Communicator& comm, double silentAfterS = 3.0);

  enum Phase { kCompute = 0, kExchange = 1 };
  void beat(int64_t step, Phase phase);
  void pulse();
  // Every other rank on this host that looks stalled: "stopped answering:
  // rank 2 (no sign of life for 60.1 s: stopped or frozen; last in the
  // gradient exchange of step 3, entered 60.3 s ago)" for one whose pulse
  // stopped, whatever step it reached, or "... rank 1 (in the compute of
  // step 3 for 12.4 s)" for one behind (step, phase); if none, why none can
  // be named (the stalled peer is on another host, or none looks stalled).
  std::string describeLaggards(int64_t step, Phase phase) const;

 private:
  struct Slot;
  Slot* slot(int localRank) const;

  SharedSegment* segment_ = nullptr;
  int localRank_ = 0, localSize_ = 1, worldSize_ = 1;
  double silentAfterS_;
};

}  // namespace bigbatch
