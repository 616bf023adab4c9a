#include "bigbatch/ddp/heartbeat.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "bigbatch/collectives/collectives.h"
#include "bigbatch/common/clock.h"

namespace bigbatch {

struct Heartbeat::Slot {
  std::atomic<int64_t> rank;
  std::atomic<int64_t> step;     // 2·step + phase
  std::atomic<int64_t> sinceNs;  // steady clock (shared by the host's processes)
  std::atomic<int64_t> pulseNs;  // last pulse; 0: none yet
};
static_assert(std::atomic<int64_t>::is_always_lock_free, "shared-memory atomics need lock-free");

namespace {

constexpr uint64_t kMirrorMagic = 0x6262686200000001ULL;  // "bbhb", version 1

// One rank's state on the wire (host byte order: every rank runs this build).
struct MirrorDatagram {
  uint64_t magic;
  uint64_t jobId;
  int64_t rank;
  int64_t step;       // 2·step + phase
  int64_t inPhaseNs;  // time in that phase when sent
};

// This host's first IPv4 address on an interface that is up and not loopback
// (network order), or 0.
uint32_t hostAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  uint32_t found = 0;
  for (ifaddrs* a = list; a && !found; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    if (!(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK)) continue;
    found = reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr;
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

Heartbeat::Heartbeat(Communicator& comm, double silentAfterS)
    : worldSize_(comm.size()), rank_(comm.rank()), silentAfterS_(silentAfterS) {
  if (comm.size() == 1) return;
  sinceNs_ = steadyNowNs();
  bool severalHosts = false;
  try {
    Communicator& host = comm.hostComm();
    localRank_ = host.rank();
    localSize_ = host.size();
    severalHosts = localSize_ < worldSize_;
    segment_ = &host.sharedSegment("heartbeat", sizeof(Slot));
  } catch (const std::exception&) {
    segment_ = nullptr;  // no shared memory: stalls are still caught, just not attributed
  }
  if (segment_) {
    Slot* mine = slot(localRank_);
    mine->rank.store(comm.rank());
    mine->step.store(0);
    mine->sinceNs.store(steadyNowNs());
    mine->pulseNs.store(0);
  }
  if (severalHosts) openMirror(comm);
}

Heartbeat::~Heartbeat() {
  if (socket_ >= 0) ::close(socket_);
}

// Collective: every rank (of every host) takes part in the one allgather,
// with or without a socket of its own.
void Heartbeat::openMirror(Communicator& comm) {
  const uint32_t address = hostAddress();
  uint16_t port = 0;
  if (address != 0) {
    socket_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in bind{};
    bind.sin_family = AF_INET;
    bind.sin_addr.s_addr = address;
    bind.sin_port = 0;
    socklen_t length = sizeof bind;
    if (socket_ < 0 || ::bind(socket_, reinterpret_cast<sockaddr*>(&bind), sizeof bind) != 0 ||
        ::getsockname(socket_, reinterpret_cast<sockaddr*>(&bind), &length) != 0) {
      if (socket_ >= 0) ::close(socket_);
      socket_ = -1;
    } else {
      port = bind.sin_port;  // network order
    }
  }
  // Per rank: [job id (rank 0's counts), address << 16 | port, usable].
  const int n = comm.size();
  std::vector<int64_t> table(3 * static_cast<size_t>(n), 0);
  const size_t at = 3 * static_cast<size_t>(comm.rank());
  table[at] =
      static_cast<int64_t>(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32));
  table[at + 1] = static_cast<int64_t>((uint64_t{address} << 16) | port);
  table[at + 2] = socket_ >= 0 ? 1 : 0;
  allgather(comm, table.data(), table.size(), DataType::kInt64);
  jobId_ = static_cast<uint64_t>(table[0]);
  if (socket_ < 0) return;
  for (int r = 0; r < n; ++r) {
    const auto packed = static_cast<uint64_t>(table[3 * r + 1]);
    const auto theirAddress = static_cast<uint32_t>(packed >> 16);
    if (r == comm.rank() || table[3 * r + 2] == 0 || theirAddress == address) continue;
    std::array<uint8_t, 6> where{};
    std::memcpy(where.data(), &theirAddress, 4);
    const auto theirPort = static_cast<uint16_t>(packed & 0xffff);
    std::memcpy(where.data() + 4, &theirPort, 2);
    peers_.emplace_back(r, where);
    remote_[r] = Remote{};
  }
}

void Heartbeat::sendMirror() {
  MirrorDatagram d{};
  d.magic = kMirrorMagic;
  d.jobId = jobId_;
  d.rank = rank_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    d.step = lastStep_;
    d.inPhaseNs = steadyNowNs() - sinceNs_;
  }
  for (const auto& [rank, where] : peers_) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    std::memcpy(&to.sin_addr.s_addr, where.data(), 4);
    std::memcpy(&to.sin_port, where.data() + 4, 2);
    // Best effort: a full buffer or an unreachable peer loses one datagram.
    (void)::sendto(socket_, &d, sizeof d, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to),
                   sizeof to);
  }
}

void Heartbeat::receiveMirror() {
  MirrorDatagram d{};
  for (;;) {
    const ssize_t got = ::recv(socket_, &d, sizeof d, MSG_DONTWAIT);
    if (got < 0) return;  // EAGAIN: nothing more (or an error: try again next pulse)
    if (got != sizeof d || d.magic != kMirrorMagic || d.jobId != jobId_) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = remote_.find(static_cast<int>(d.rank));
    if (it == remote_.end()) continue;
    it->second = {d.step, d.inPhaseNs, steadyNowNs()};
  }
}

Heartbeat::Slot* Heartbeat::slot(int localRank) const {
  return reinterpret_cast<Slot*>(segment_->slot(localRank));
}

void Heartbeat::beat(int64_t step, Phase phase) {
  if (socket_ >= 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    lastStep_ = 2 * step + phase;
    sinceNs_ = steadyNowNs();
  }
  if (!segment_) return;
  Slot* mine = slot(localRank_);
  mine->sinceNs.store(steadyNowNs(), std::memory_order_relaxed);
  mine->step.store(2 * step + phase, std::memory_order_release);
}

void Heartbeat::pulse() {
  if (segment_) slot(localRank_)->pulseNs.store(steadyNowNs(), std::memory_order_relaxed);
  if (socket_ >= 0) {
    sendMirror();
    receiveMirror();
  }
}

std::string Heartbeat::describeLaggards(int64_t step, Phase phase) const {
  if (!segment_ && socket_ < 0) {
    return "the stalled peer cannot be told (no shared-memory heartbeat)";
  }
  auto where = [](int64_t code) {
    return fmt::format("the {} of step {}", code % 2 ? "gradient exchange" : "compute", code / 2);
  };
  const int64_t now = steadyNowNs();
  std::vector<std::string> stalled;
  for (int r = 0; r < localSize_ && segment_; ++r) {
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
  {
    // Ranks on other hosts, as their datagrams last said.
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [rank, r] : remote_) {
      if (r.arrivedNs == 0) continue;  // never heard: nothing to say
      const double silentS = static_cast<double>(now - r.arrivedNs) * 1e-9;
      const double inPhaseS = static_cast<double>(r.inPhaseNs) * 1e-9 + silentS;
      if (silentS > silentAfterS_) {
        stalled.push_back(
            fmt::format("rank {} on another host (no sign of life for {:.1f} s: stopped, frozen "
                        "or cut off; last in {}, entered {:.1f} s ago)",
                        rank, silentS, where(r.step), inPhaseS));
      } else if (r.step < 2 * step + phase) {
        stalled.push_back(fmt::format("rank {} on another host (in {} for {:.1f} s)", rank,
                                      where(r.step), inPhaseS));
      }
    }
  }
  if (!stalled.empty()) return fmt::format("stopped answering: {}", fmt::join(stalled, ", "));
  if (localSize_ < worldSize_ && socket_ < 0) {
    return "no rank on this host looks stalled (each is alive and reached this step): the "
           "stalled peer is on another host";
  }
  return "no rank looks stalled: each is alive and reached this step";
}

}  // namespace bigbatch
