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
#include <cstddef>
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
// What the host's carrier last heard of one rank on another host.
struct Heartbeat::RemoteSlot {
  std::atomic<int64_t> step;       // 2·step + phase
  std::atomic<int64_t> inPhaseNs;  // time in that phase when sent
  std::atomic<int64_t> silentNs;   // time since its own pulse when sent
  std::atomic<int64_t> arrivedNs;  // this host's steady clock at arrival; 0: never heard
};
static_assert(std::atomic<int64_t>::is_always_lock_free, "shared-memory atomics need lock-free");

namespace {

constexpr uint64_t kMirrorMagic = 0x6262686200000002ULL;  // "bbhb", version 2
constexpr int kMaxAddresses = 4;
constexpr int kRanksPerDatagram = 64;

// One host's table on the wire (host byte order: every rank runs this build).
struct MirrorEntry {
  int64_t rank;
  int64_t step;       // 2·step + phase
  int64_t inPhaseNs;  // time in that phase when sent
  int64_t silentNs;   // time since its pulse when sent (0: no pulse yet)
};
struct MirrorDatagram {
  uint64_t magic;
  uint64_t jobId;
  int64_t carrier;
  int64_t count;
  MirrorEntry entries[kRanksPerDatagram];
};

// This host's up, non-loopback IPv4 addresses (network order), at most
// kMaxAddresses; loopback alone where there is none.
std::vector<uint32_t> hostAddresses() {
  std::vector<uint32_t> found;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a && found.size() < kMaxAddresses; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
      if (!(a->ifa_flags & IFF_UP) || (a->ifa_flags & IFF_LOOPBACK)) continue;
      found.push_back(reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
    }
    freeifaddrs(list);
  }
  if (found.empty()) found.push_back(htonl(INADDR_LOOPBACK));
  return found;
}

}  // namespace

Heartbeat::Heartbeat(Communicator& comm, double silentAfterS)
    : worldSize_(comm.size()), rank_(comm.rank()), silentAfterS_(silentAfterS) {
  if (comm.size() == 1) return;
  bool severalHosts = false;
  try {
    Communicator& host = comm.hostComm();
    localRank_ = host.rank();
    localSize_ = host.size();
    severalHosts = localSize_ < worldSize_;
    segment_ = &host.sharedSegment("heartbeat", sizeof(Slot));
    if (severalHosts) {
      remoteSegment_ = &host.sharedSegment(
          "heartbeat-remote", sizeof(RemoteSlot) * static_cast<size_t>(worldSize_));
    }
  } catch (const std::exception&) {
    segment_ = remoteSegment_ = nullptr;  // stalls are still caught, just not attributed
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

// Collective: every rank (of every host) takes part in one broadcast inside
// its host and one allgather, with or without a mirror of its own.
void Heartbeat::openMirror(Communicator& comm) {
  // This host's carrier: its local rank 0, named by its global rank.
  int64_t carrier = comm.rank();
  broadcast(comm.hostComm(), &carrier, sizeof carrier, 0);
  const bool usable = remoteSegment_ != nullptr;
  std::vector<uint32_t> addresses;
  uint16_t port = 0;
  if (usable && localRank_ == 0) {
    socket_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in bind{};
    bind.sin_family = AF_INET;
    bind.sin_addr.s_addr = htonl(INADDR_ANY);  // whichever address the peers' datagrams reach
    socklen_t length = sizeof bind;
    if (socket_ < 0 || ::bind(socket_, reinterpret_cast<sockaddr*>(&bind), sizeof bind) != 0 ||
        ::getsockname(socket_, reinterpret_cast<sockaddr*>(&bind), &length) != 0) {
      if (socket_ >= 0) ::close(socket_);
      socket_ = -1;
    } else {
      port = bind.sin_port;  // network order
      addresses = hostAddresses();
    }
  }
  // Per rank: [job id (rank 0's counts), its carrier, mirror usable, the
  // number of addresses, kMaxAddresses x (address << 16 | port)].
  constexpr size_t kWidth = 4 + kMaxAddresses;
  const int n = comm.size();
  std::vector<int64_t> table(kWidth * static_cast<size_t>(n), 0);
  int64_t* mine = table.data() + kWidth * static_cast<size_t>(comm.rank());
  mine[0] = static_cast<int64_t>(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32));
  mine[1] = carrier;
  mine[2] = usable && (localRank_ != 0 || socket_ >= 0) ? 1 : 0;
  mine[3] = static_cast<int64_t>(addresses.size());
  for (size_t i = 0; i < addresses.size(); ++i) {
    mine[4 + i] = static_cast<int64_t>((uint64_t{addresses[i]} << 16) | port);
  }
  allgather(comm, table.data(), table.size(), DataType::kInt64);
  jobId_ = static_cast<uint64_t>(table[0]);
  hostOf_.resize(static_cast<size_t>(n));
  bool everyHostMirrors = true;
  for (int r = 0; r < n; ++r) {
    const int64_t* theirs = table.data() + kWidth * static_cast<size_t>(r);
    hostOf_[r] = static_cast<int>(theirs[1]);
    everyHostMirrors = everyHostMirrors && theirs[2] == 1;
  }
  // On or off for the whole job: every rank took the same decision from
  // the same table.
  mirrored_ = everyHostMirrors;
  mirrorSinceNs_ = steadyNowNs();
  if (!mirrored_) {
    if (socket_ >= 0) ::close(socket_);
    socket_ = -1;
    return;
  }
  if (localRank_ == 0) {
    for (int r = 0; r < n; ++r) remote(r)->arrivedNs.store(0);
  }
  if (socket_ < 0) return;
  for (int r = 0; r < n; ++r) {
    if (hostOf_[r] != r || r == comm.rank()) continue;  // carriers of other hosts only
    const int64_t* theirs = table.data() + kWidth * static_cast<size_t>(r);
    Peer peer{r, {}};
    for (int64_t i = 0; i < theirs[3]; ++i) {
      const auto packed = static_cast<uint64_t>(theirs[4 + i]);
      const auto address = static_cast<uint32_t>(packed >> 16);
      const auto theirPort = static_cast<uint16_t>(packed & 0xffff);
      std::array<uint8_t, 6> where{};
      std::memcpy(where.data(), &address, 4);
      std::memcpy(where.data() + 4, &theirPort, 2);
      peer.addresses.push_back(where);
    }
    peers_.push_back(std::move(peer));
  }
}

void Heartbeat::sendMirror() {
  const int64_t now = steadyNowNs();
  for (int first = 0; first < localSize_; first += kRanksPerDatagram) {
    MirrorDatagram d{};
    d.magic = kMirrorMagic;
    d.jobId = jobId_;
    d.carrier = rank_;
    for (int r = first; r < localSize_ && d.count < kRanksPerDatagram; ++r) {
      const Slot* s = slot(r);
      const int64_t pulse = s->pulseNs.load(std::memory_order_relaxed);
      d.entries[d.count++] = {s->rank.load(), s->step.load(std::memory_order_acquire),
                              now - s->sinceNs.load(), pulse == 0 ? 0 : now - pulse};
    }
    const size_t bytes = offsetof(MirrorDatagram, entries) + sizeof(MirrorEntry) * d.count;
    for (const Peer& peer : peers_) {
      for (const auto& where : peer.addresses) {
        sockaddr_in to{};
        to.sin_family = AF_INET;
        std::memcpy(&to.sin_addr.s_addr, where.data(), 4);
        std::memcpy(&to.sin_port, where.data() + 4, 2);
        // Best effort: a full buffer or an unreachable address loses one datagram.
        (void)::sendto(socket_, &d, bytes, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to),
                       sizeof to);
      }
    }
  }
}

void Heartbeat::receiveMirror() {
  MirrorDatagram d{};
  for (;;) {
    const ssize_t got = ::recv(socket_, &d, sizeof d, MSG_DONTWAIT);
    if (got < 0) return;  // EAGAIN: nothing more (or an error: try again next pulse)
    const auto header = static_cast<ssize_t>(offsetof(MirrorDatagram, entries));
    if (got < header || d.magic != kMirrorMagic || d.jobId != jobId_ || d.count < 0 ||
        d.count > kRanksPerDatagram ||
        got != header + static_cast<ssize_t>(sizeof(MirrorEntry)) * d.count) {
      continue;
    }
    const int64_t now = steadyNowNs();
    for (int64_t i = 0; i < d.count; ++i) {
      const MirrorEntry& e = d.entries[i];
      // Only ranks of the host that sent it, never this host's own.
      if (e.rank < 0 || e.rank >= worldSize_ || hostOf_[e.rank] != d.carrier ||
          hostOf_[e.rank] == hostOf_[rank_]) {
        continue;
      }
      RemoteSlot* r = remote(static_cast<int>(e.rank));
      r->step.store(e.step, std::memory_order_relaxed);
      r->inPhaseNs.store(e.inPhaseNs, std::memory_order_relaxed);
      r->silentNs.store(e.silentNs, std::memory_order_relaxed);
      r->arrivedNs.store(now, std::memory_order_release);
    }
  }
}

Heartbeat::RemoteSlot* Heartbeat::remote(int rank) const {
  return reinterpret_cast<RemoteSlot*>(remoteSegment_->slot(0)) + rank;
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
  if (socket_ >= 0) {
    sendMirror();
    receiveMirror();
  }
}

namespace {

std::string where(int64_t code) {
  return fmt::format("the {} of step {}", code % 2 ? "gradient exchange" : "compute", code / 2);
}

}  // namespace

// The ranks on other hosts, as their carriers' datagrams last said.
void Heartbeat::describeRemote(int64_t code, int64_t now, std::vector<std::string>& stalled,
                               std::vector<int>& neverHeard) const {
  for (int rank = 0; rank < worldSize_; ++rank) {
    if (hostOf_[rank] == hostOf_[rank_]) continue;
    const RemoteSlot* r = remote(rank);
    const int64_t arrived = r->arrivedNs.load(std::memory_order_acquire);
    if (arrived == 0) {
      neverHeard.push_back(rank);
      continue;
    }
    const double sinceArrivalS = static_cast<double>(now - arrived) * 1e-9;
    const double silentS = static_cast<double>(r->silentNs.load()) * 1e-9 + sinceArrivalS;
    const double inPhaseS = static_cast<double>(r->inPhaseNs.load()) * 1e-9 + sinceArrivalS;
    const int64_t theirs = r->step.load();
    if (silentS > silentAfterS_) {
      const std::string carrier =
          sinceArrivalS > silentAfterS_ && hostOf_[rank] != rank
              ? fmt::format(" — or rank {}, which carries its host's heartbeat", hostOf_[rank])
              : "";
      stalled.push_back(fmt::format(
          "rank {} on another host (no sign of life for {:.1f} s: stopped, frozen or cut off{}; "
          "last in {}, entered {:.1f} s ago)",
          rank, silentS, carrier, where(theirs), inPhaseS));
    } else if (theirs < code) {
      stalled.push_back(fmt::format("rank {} on another host (in {} for {:.1f} s)", rank,
                                    where(theirs), inPhaseS));
    }
  }
}

std::string Heartbeat::describeLaggards(int64_t step, Phase phase) const {
  if (!segment_) return "the stalled peer cannot be told (no shared-memory heartbeat)";
  const int64_t now = steadyNowNs(), code = 2 * step + phase;
  std::vector<std::string> stalled;
  bool carrierSilent = false;
  for (int r = 0; r < localSize_; ++r) {
    if (r == localRank_) continue;
    const Slot* s = slot(r);
    const int64_t theirs = s->step.load(std::memory_order_acquire);
    const double inPhaseS = static_cast<double>(now - s->sinceNs.load()) * 1e-9;
    const int64_t pulse = s->pulseNs.load(std::memory_order_relaxed);
    const double silentS = static_cast<double>(now - pulse) * 1e-9;
    if (pulse != 0 && silentS > silentAfterS_) {
      carrierSilent = carrierSilent || r == 0;
      stalled.push_back(
          fmt::format("rank {} (no sign of life for {:.1f} s: stopped or frozen; "
                      "last in {}, entered {:.1f} s ago)",
                      s->rank.load(), silentS, where(theirs), inPhaseS));
    } else if (theirs < code) {
      stalled.push_back(
          fmt::format("rank {} (in {} for {:.1f} s)", s->rank.load(), where(theirs), inPhaseS));
    }
  }
  std::vector<int> neverHeard;
  // A silent carrier relays nothing: what this host holds of the other
  // hosts is stale, and saying they stalled would be a guess.
  if (mirrored_ && !carrierSilent) describeRemote(code, now, stalled, neverHeard);
  std::string out;
  if (!stalled.empty()) out = fmt::format("stopped answering: {}", fmt::join(stalled, ", "));
  const double openS = static_cast<double>(now - mirrorSinceNs_) * 1e-9;
  if (!neverHeard.empty() && openS > silentAfterS_) {
    out += fmt::format(
        "{}never heard from rank(s) {} on other hosts in {:.1f} s: no heartbeat datagram arrived "
        "from their host (a firewall, or no route between the hosts' addresses), so whether they "
        "run cannot be told",
        out.empty() ? "" : "; ", fmt::join(neverHeard, ", "), openS);
  }
  if (!out.empty()) return out;
  if (localSize_ < worldSize_ && (!mirrored_ || carrierSilent)) {
    return "no rank on this host looks stalled (each is alive and reached this step): the "
           "stalled peer is on another host";
  }
  return "no rank looks stalled: each is alive and reached this step";
}

}  // namespace bigbatch
