// Heartbeat: each rank's progress (its global rank, the step it is in and
// when it entered it) in a table in this host's shared memory, readable
// without MPI. When a collective stalls, the survivors read the table to name
// the rank that stopped (the one that never reached their step) — MPI itself
// cannot say which peer a blocked MPI_Allreduce waits for.
//
// Threading: beat() from the compute thread; describeLaggards() from any
// thread (the watchdog's). Construction is collective over the host's ranks.
#pragma once

#include <cstdint>
#include <string>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

class Heartbeat {
 public:
  // Allocates the table on comm's host ranks; without shared memory (or on
  // one rank) it is inert and describeLaggards() says so.
  explicit Heartbeat(Communicator& comm);

  enum Phase { kCompute = 0, kExchange = 1 };
  void beat(int64_t step, Phase phase);
  // "rank 1 (in the compute of step 3 for 12.4 s)" for every rank on this
  // host behind (step, phase); if none, a note that the stalled peer is on
  // another host (or that none could be told).
  std::string describeLaggards(int64_t step, Phase phase) const;

 private:
  struct Slot;
  Slot* slot(int localRank) const;

  SharedSegment* segment_ = nullptr;
  int localRank_ = 0, localSize_ = 1;
};

}  // namespace bigbatch
