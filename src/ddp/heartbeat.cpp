#include "bigbatch/ddp/heartbeat.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <chrono>
#include <vector>

#include "bigbatch/common/clock.h"

namespace bigbatch {

struct Heartbeat::Slot {
  std::atomic<int64_t> rank;
  std::atomic<int64_t> step;     // 2·step + phase
  std::atomic<int64_t> sinceNs;  // steady clock (shared by the host's processes)
  std::atomic<int64_t> pulseNs;  // last pulse; 0: none yet
};
static_assert(std::atomic<int64_t>::is_always_lock_free, "shared-memory atomics need lock-free");

Heartbeat::Heartbeat(Communicator& comm, double silentAfterS)
    : worldSize_(comm.size()), silentAfterS_(silentAfterS) {
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
  mine->pulseNs.store(0);
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

void Heartbeat::pulse() {
  if (segment_) slot(localRank_)->pulseNs.store(steadyNowNs(), std::memory_order_relaxed);
}

std::string Heartbeat::describeLaggards(int64_t step, Phase phase) const {
  if (!segment_) return "the stalled peer cannot be told (no shared-memory heartbeat)";
  auto where = [](int64_t code) {
    return fmt::format("the {} of step {}", code % 2 ? "gradient exchange" : "compute", code / 2);
  };
  const int64_t now = steadyNowNs();
  std::vector<std::string> stalled;
  for (int r = 0; r < localSize_; ++r) {
    if (r == localRank_) continue;
    const Slot* s = slot(r);
    const int64_t theirs = s->step.load(std::memory_order_acquire);
    const double inPhaseS = static_cast<double>(now - s->sinceNs.load()) * 1e-9;
    const int64_t pulse = s->pulseNs.load(std::memory_order_relaxed);
    const double silentS = static_cast<double>(now - pulse) * 1e-9;
    if (pulse != 0 && silentS > silentAfterS_) {
      stalled.push_back(
          fmt::format("rank {} (no sign of life for {:.1f} s: stopped or frozen; "
                      "last in {}, entered {:.1f} s ago)",
                      s->rank.load(), silentS, where(theirs), inPhaseS));
    } else if (theirs < 2 * step + phase) {
      stalled.push_back(
          fmt::format("rank {} (in {} for {:.1f} s)", s->rank.load(), where(theirs), inPhaseS));
    }
  }
  if (!stalled.empty()) return fmt::format("stopped answering: {}", fmt::join(stalled, ", "));
  if (localSize_ < worldSize_) {
    return "no rank on this host looks stalled (each is alive and reached this step): the "
           "stalled peer is on another host";
  }
  return "no rank looks stalled: each is alive and reached this step";
}

}  // namespace bigbatch
