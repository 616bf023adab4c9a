#include "bigbatch/ddp/heartbeat.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <vector>

#include "bigbatch/common/clock.h"

namespace bigbatch {

struct Heartbeat::Slot {
  std::atomic<int64_t> rank;
  std::atomic<int64_t> step;  // 2·step + phase
  std::atomic<int64_t> sinceNs;  // steady clock (shared by the host's processes)
};
static_assert(std::atomic<int64_t>::is_always_lock_free, "shared-memory atomics need lock-free");

Heartbeat::Heartbeat(Communicator& comm) {
  if (comm.size() == 1) return;
  try {
    Communicator& host = comm.hostComm();
    localRank_ = host.rank();
    localSize_ = host.size();
    segment_ = &host.sharedSegment("heartbeat", sizeof(Slot));
  } catch (const std::exception&) {
    segment_ = nullptr;  // no shared memory: stalls are still caught, just not attributed
    return;
  }
  Slot* mine = slot(localRank_);
  mine->rank.store(comm.rank());
  mine->step.store(0);
  mine->sinceNs.store(steadyNowNs());
}

Heartbeat::Slot* Heartbeat::slot(int localRank) const {
  return reinterpret_cast<Slot*>(segment_->slot(localRank));
}

void Heartbeat::beat(int64_t step, Phase phase) {
  if (!segment_) return;
  Slot* mine = slot(localRank_);
  mine->sinceNs.store(steadyNowNs(), std::memory_order_relaxed);
  mine->step.store(2 * step + phase, std::memory_order_release);
}

std::string Heartbeat::describeLaggards(int64_t step, Phase phase) const {
  if (!segment_) return "the stalled peer cannot be told (no shared-memory heartbeat)";
  std::vector<std::string> behind;
  for (int r = 0; r < localSize_; ++r) {
    if (r == localRank_) continue;
    const Slot* s = slot(r);
    const int64_t theirs = s->step.load(std::memory_order_acquire);
    if (theirs < 2 * step + phase) {
      behind.push_back(fmt::format("rank {} (in the {} of step {} for {:.1f} s)", s->rank.load(),
                                   theirs % 2 ? "gradient exchange" : "compute", theirs / 2,
                                   static_cast<double>(steadyNowNs() - s->sinceNs.load()) * 1e-9));
    }
  }
  if (behind.empty()) return "every rank on this host reached this step: the stalled peer is on another host";
  return fmt::format("{}", fmt::join(behind, ", "));
}

}  // namespace bigbatch
