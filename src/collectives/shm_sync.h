// Step counters in shared memory: the synchronisation of the shared-memory
// collectives. Each rank owns one 64-bit counter in the first cache line of
// its slot and only ever increments it; "all ranks reached step e" means every
// counter is >= e. No reset is needed between calls, and a rank never waits
// on a location another rank writes concurrently with anything but a load.
//
// Waits spin (a step is a few microseconds when every rank has a core), then
// yield — or sleep, on the communication thread (comm/peer_wait.h) — poll
// peers' error notices, and raise TimeoutError naming the slowest rank once
// the communicator's deadline passes: a peer that died mid-collective ends
// the wait instead of hanging it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/comm/peer_wait.h"
#include "bigbatch/common/error.h"

namespace bigbatch {

inline constexpr size_t kShmControlBytes = 64;  // one cache line per rank

inline uint64_t* shmCounter(SharedSegment& seg, int rank) {
  return reinterpret_cast<uint64_t*>(seg.slot(rank));
}

inline uint64_t shmLoad(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

// Publishes that this rank reached `step` (its writes before are visible).
inline void shmArrive(SharedSegment& seg, int me, uint64_t step) {
  __atomic_store_n(shmCounter(seg, me), step, __ATOMIC_RELEASE);
}

// Work a caller keeps moving while it waits (the hierarchical allreduce's
// inter-host rings in flight): called once on entry to a wait, so at least
// once a chunk, and on every unsuccessful poll.
using ShmProgress = std::function<void()>;

// Waits until every rank of `comm` has reached `step`.
inline void shmWaitAll(Communicator& comm, SharedSegment& seg, uint64_t step, const char* what,
                       const ShmProgress& progress = {}) {
  if (progress) progress();
  const int n = comm.size();
  int next = 0;  // ranks below `next` are known to have arrived
  std::chrono::steady_clock::time_point deadline{};
  PeerWait wait;  // spin, then yield (compute thread) or sleep (background)
  for (;;) {
    while (next < n && shmLoad(shmCounter(seg, next)) >= step) ++next;
    if (next == n) return;
    if (progress) progress();
    wait.idle();
    if (wait.polls() > PeerWait::kSpinPolls && (wait.polls() & 255) == 0) {
      comm.pollPeerErrors();
      const auto now = std::chrono::steady_clock::now();
      if (deadline == std::chrono::steady_clock::time_point{}) {
        deadline = now + std::chrono::milliseconds(comm.timeoutMs());
      } else if (now > deadline) {
        BIGBATCH_THROW(TimeoutError,
                       "rank {} did not reach step {} of the {} within {} ms (it is at step {}); "
                       "the peer may have failed, hung, or called another collective",
                       next, step, what, comm.timeoutMs(), shmLoad(shmCounter(seg, next)));
      }
    }
  }
}

}  // namespace bigbatch
