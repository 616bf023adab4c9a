// Heartbeat: each rank's progress (its global rank, the step and phase it is
// in and since when) and a pulse that says the process still runs, in a
// table in this host's shared memory, readable without MPI. When a
// collective stalls, the survivors read the table to name the rank that
// stopped — MPI itself cannot say which peer a blocked MPI_Allreduce waits
// for: a rank whose pulse stopped (a stopped or frozen process, whatever
// step it reached), or one that never reached the survivors' step.
//
// Across hosts the table is mirrored by datagrams, one carrier per host:
// with every pulse the host's lowest rank (local rank 0) reads its host's
// table and sends all of it — each rank's step, phase, time in phase and
// time since its last pulse — in one UDP datagram to the carrier of every
// other host, and writes what arrives from them into a second shared table
// that every rank of its host reads. Per pulse period (0.2 s) that is
// hosts·(hosts - 1) datagrams in the whole job, each of 32 + 32·G bytes for
// G ranks per host, times the addresses tried (below) — not one per pair of
// ranks, which grows as ranks². Addresses are exchanged once over the
// communicator at construction: every up, non-loopback IPv4 address of the
// carrier's host (at most 4; loopback where there is none), one port bound
// on all of them, and each datagram goes to each of the other carrier's
// addresses — whichever the network routes arrives; no interface (docker0,
// a management network) is guessed. Which ranks are remote is known from
// the host grouping, not from addresses. A remote rank silent for
// `silentAfterS` — its own pulse, or its host's datagrams — is "no sign of
// life" as a local one whose pulse stopped; no clock is compared across
// hosts, only durations and arrival times here. A remote rank never heard
// from is named as such: whether it runs cannot be told. Datagrams carry a
// job id (rank 0's random number) and are dropped otherwise.
//
// Threading: beat() from the compute thread; pulse() from a thread that
// runs as long as the process does (the stall watchdog's, every tick);
// describeLaggards() from any thread. Construction is collective over the
// host's ranks.
#pragma once

#include <array>
#include <cstdint>
#include <string>
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
  struct RemoteSlot;
  Slot* slot(int localRank) const;
  RemoteSlot* remote(int rank) const;  // in the host's table of remote ranks
  // The cross-host mirror: set up (collective), and on the carrier: send
  // this host's table to the other carriers, take in what arrived.
  void openMirror(Communicator& comm);
  void sendMirror();
  void receiveMirror();
  void describeRemote(int64_t code, int64_t now, std::vector<std::string>& stalled,
                      std::vector<int>& neverHeard) const;

  SharedSegment* segment_ = nullptr;
  SharedSegment* remoteSegment_ = nullptr;  // local rank 0's slot: every remote rank's state
  int localRank_ = 0, localSize_ = 1, worldSize_ = 1, rank_ = 0;
  double silentAfterS_;

  bool mirrored_ = false;          // the cross-host tables are in use
  int socket_ = -1;                // the carrier's only
  uint64_t jobId_ = 0;
  int64_t mirrorSinceNs_ = 0;      // when the mirror opened
  std::vector<int> hostOf_;        // rank -> its host's carrier rank
  struct Peer {
    int carrier;
    std::vector<std::array<uint8_t, 6>> addresses;  // IPv4 + port, network order
  };
  std::vector<Peer> peers_;        // the other hosts' carriers (carrier only)
};

}  // namespace bigbatch
