// Heartbeat: each rank's progress (its global rank, the step and phase it is
// in and since when) and a pulse that says the process still runs, in a
// table in this host's shared memory, readable without MPI. When a
// collective stalls, the survivors read the table to name the rank that
// stopped — MPI itself cannot say which peer a blocked MPI_Allreduce waits
// for: a rank whose pulse stopped (a stopped or frozen process, whatever
// step it reached), or one that never reached the survivors' step.
//
// Across hosts the table is mirrored by datagrams: with every pulse each
// rank sends its (rank, step, phase, time in phase) over UDP to every rank
// on another host (addresses exchanged once over the communicator at
// construction: this host's first non-loopback IPv4 address and a port the
// kernel picked), and takes in what arrived. A remote rank whose datagrams
// stopped for `silentAfterS` is "no sign of life" as a local one whose
// pulse stopped — no clock is compared across hosts, only arrival times
// here. Datagrams carry a job id (rank 0's random number) and are dropped
// otherwise. Without a usable address or socket the mirror is off and a
// stall on another host is reported as such, unnamed.
//
// Threading: beat() from the compute thread; pulse() from a thread that
// runs as long as the process does (the stall watchdog's, every tick);
// describeLaggards() from any thread. Construction is collective over the
// host's ranks.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

class Heartbeat {
 public:
  // Allocates the table on comm's host ranks; without shared memory (or on
  // one rank) it is inert and describeLaggards() says so. A rank whose
  // pulses had started and whose last pulse is older than `silentAfterS`
  // counts as not running (the watchdog pulses every 0.2 s).
  explicit Heartbeat(Communicator& comm, double silentAfterS = 3.0);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

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
  // The cross-host mirror: set up (collective), send this rank's slot to
  // the other hosts' ranks, take in what arrived.
  void openMirror(Communicator& comm);
  void sendMirror();
  void receiveMirror();

  SharedSegment* segment_ = nullptr;
  int localRank_ = 0, localSize_ = 1, worldSize_ = 1, rank_ = 0;
  double silentAfterS_;

  struct Remote {
    int64_t step = -1;      // 2·step + phase as last heard
    int64_t inPhaseNs = 0;  // time in that phase when sent
    int64_t arrivedNs = 0;  // local steady clock at arrival; 0: never heard
  };
  int socket_ = -1;
  uint64_t jobId_ = 0;
  std::vector<std::pair<int, std::array<uint8_t, 6>>> peers_;  // rank, IPv4 + port (network order)
  int64_t lastStep_ = 0, sinceNs_ = 0;                         // this rank's own, for sendMirror
  mutable std::mutex mutex_;                                   // guards remote_ and the two above
  std::map<int, Remote> remote_;  // rank on another host -> what it said
};

}  // namespace bigbatch
