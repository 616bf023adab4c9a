#include "store_world.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "bigbatch/common/error.h"

namespace bigbatch::store_world {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kSplitTag = 0x7e7d;
constexpr int kShmTag = 0x7e7e;

// Polls for `key`, giving up early when a rank has written `refusedKey`.
std::string awaitKey(KeyValueStore& store, const std::string& key, const std::string& refusedKey,
                     Clock::time_point deadline, const std::string& missing) {
  while (!store.check(key)) {
    if (store.check(refusedKey)) {
      BIGBATCH_THROW(InvalidArgument, "{}", store.get(refusedKey, milliseconds(1000)));
    }
    if (Clock::now() > deadline) BIGBATCH_THROW(TimeoutError, "{}", missing);
    std::this_thread::sleep_for(milliseconds(5));
  }
  return store.get(key, milliseconds(1000));
}

class PosixSharedSegment : public SharedSegment {
 public:
  PosixSharedSegment(uint8_t* base, size_t slotBytes, int ranks)
      : base_(base), slotBytes_(slotBytes), total_(slotBytes * static_cast<size_t>(ranks)) {}
  ~PosixSharedSegment() override { munmap(base_, total_); }
  uint8_t* slot(int rank) override { return base_ + slotBytes_ * static_cast<size_t>(rank); }
  size_t slotBytes() const override { return slotBytes_; }

 private:
  uint8_t* base_;
  size_t slotBytes_, total_;
};

uint8_t* mapShared(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

}  // namespace

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string thisHostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

std::vector<std::string> meet(KeyValueStore& store, int rank, int size, const std::string& prefix,
                              const std::string& host, milliseconds timeout) {
  BIGBATCH_REQUIRE(size >= 1 && rank >= 0 && rank < size, InvalidArgument,
                   "rank {} of a world of {}: RANK must lie in 0 .. WORLD_SIZE-1", rank, size);
  const auto deadline = Clock::now() + timeout;
  const std::string refused = prefix + "refused";
  store.set(prefix + "rank/" + std::to_string(rank), std::to_string(size) + " " + host);
  std::vector<std::string> hosts(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const std::string value = awaitKey(
        store, prefix + "rank/" + std::to_string(r), refused, deadline,
        fmt::format("rank {} did not reach the {} within {} ms (this rank is {} of {}): it may "
                    "not have started, or was given another MASTER_ADDR/MASTER_PORT",
                    r, store.describe(), timeout.count(), rank, size));
    const size_t space = value.find(' ');
    const int theirs = std::atoi(value.substr(0, space).c_str());
    if (theirs != size) {
      const std::string message = fmt::format(
          "the ranks disagree on the world size: rank {} was given WORLD_SIZE={}, rank {} "
          "WORLD_SIZE={}; start every rank with the same value",
          r, theirs, rank, size);
      store.set(refused, message);
      BIGBATCH_THROW(InvalidArgument, "{}", message);
    }
    hosts[static_cast<size_t>(r)] = value.substr(space + 1);
  }
  return hosts;
}

HostLayout hostLayout(const std::vector<std::string>& hostOfWorldRank,
                      const std::vector<int>& members, int me) {
  HostLayout l;
  l.rank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  const std::string& mine = hostOfWorldRank[static_cast<size_t>(me)];
  l.color = -1;
  l.localSize = 0;
  for (size_t r = 0; r < members.size(); ++r) {
    if (hostOfWorldRank[static_cast<size_t>(members[r])] != mine) continue;
    if (l.color < 0) l.color = static_cast<int>(r);
    if (static_cast<int>(r) < l.rank) ++l.localRank;
    ++l.localSize;
  }
  return l;
}

std::vector<int> splitMembers(Communicator& comm, const std::vector<int>& members, int color,
                              int key) {
  // Every rank's (colour, key), passed round a ring: n-1 steps of one entry.
  const int n = comm.size(), me = comm.rank();
  std::vector<int64_t> entries(static_cast<size_t>(2 * n), 0);
  entries[static_cast<size_t>(2 * me)] = color;
  entries[static_cast<size_t>(2 * me + 1)] = key;
  for (int step = 0; step < n - 1; ++step) {
    const int sendIndex = (me - step + n) % n;
    const int recvIndex = (me - step - 1 + n) % n;
    comm.sendrecv(&entries[static_cast<size_t>(2 * sendIndex)], 2 * sizeof(int64_t), (me + 1) % n,
                  &entries[static_cast<size_t>(2 * recvIndex)], 2 * sizeof(int64_t),
                  (me - 1 + n) % n, kSplitTag);
  }
  std::vector<std::pair<int64_t, int>> mine;  // (key, rank) of this colour
  for (int r = 0; r < n; ++r) {
    if (entries[static_cast<size_t>(2 * r)] == color) {
      mine.emplace_back(entries[static_cast<size_t>(2 * r + 1)], r);
    }
  }
  std::sort(mine.begin(), mine.end());
  std::vector<int> out;
  for (const auto& [k, r] : mine) out.push_back(members[static_cast<size_t>(r)]);
  return out;
}

uint32_t childSpace(uint32_t parentSpace, uint64_t splitNumber, int color, uint32_t spaces) {
  const uint64_t h =
      mix64((uint64_t{parentSpace} << 32) ^ mix64(splitNumber) ^ mix64(uint64_t(color) + 7));
  return 2 + static_cast<uint32_t>(h % (spaces - 3));  // never the world's space (1)
}

std::unique_ptr<SharedSegment> allocatePosixShared(Communicator& comm, size_t slotBytes,
                                                   const std::string& name) {
  const int n = comm.size(), me = comm.rank();
  BIGBATCH_REQUIRE(comm.localSize() == n, InvalidArgument,
                   "shared memory on a communicator whose {} ranks span more than one host", n);
  slotBytes = (std::max<size_t>(slotBytes, 64) + 63) / 64 * 64;  // no two slots share a line
  const size_t total = slotBytes * static_cast<size_t>(n);
  // Whatever happens below (a peer that fails mid-way throws out of a send),
  // this rank's descriptor and mapping go, and the object goes if this rank
  // made it: nothing outlives the processes.
  struct Held {
    char name[96] = {};
    int fd = -1;
    uint8_t* base = nullptr;
    size_t total = 0;
    bool created = false, kept = false;
    ~Held() {
      if (fd >= 0) close(fd);
      if (base != nullptr && !kept) munmap(base, total);
      if (created) shm_unlink(name);
    }
  } held;
  held.total = total;
  std::string problem;
  if (me == 0) {
    // A random part too: jobs in containers that share /dev/shm but not a
    // PID namespace may have the same pids.
    // And a count of this process's segments: two groups of one process
    // (subgroups) have the same pid, space and per-communicator count.
    static std::atomic<unsigned> made{0};
    std::snprintf(held.name, sizeof(held.name), "%s-%u-%08x", name.c_str(), ++made,
                  static_cast<unsigned>(mix64(static_cast<uint64_t>(
                      Clock::now().time_since_epoch().count())) & 0xffffffffu));
    struct statvfs fs {};
    if (statvfs("/dev/shm", &fs) == 0 && fs.f_bavail * fs.f_frsize < total) {
      problem = fmt::format("/dev/shm has {} MiB free, the shared phase needs {} MiB (a "
                            "container's default 64 MiB? start it with a larger --shm-size)",
                            fs.f_bavail * fs.f_frsize >> 20, total >> 20);
    } else if ((held.fd = shm_open(held.name, O_CREAT | O_EXCL | O_RDWR, 0600)) < 0) {
      problem = fmt::format("making shared memory {}: {}", held.name, std::strerror(errno));
    } else if (held.created = true; ftruncate(held.fd, static_cast<off_t>(total)) != 0 ||
                                    (held.base = mapShared(held.fd, total)) == nullptr) {
      problem = fmt::format("sizing shared memory {} to {} bytes: {}", held.name, total,
                            std::strerror(errno));
    }
    for (int r = 1; r < n; ++r) comm.send(held.name, sizeof(held.name), r, kShmTag);
  } else {
    comm.recv(held.name, sizeof(held.name), 0, kShmTag);
    if ((held.fd = shm_open(held.name, O_RDWR, 0600)) < 0 ||
        (held.base = mapShared(held.fd, total)) == nullptr) {
      problem = fmt::format("opening shared memory {}: {}", held.name, std::strerror(errno));
    }
  }
  // Everyone's outcome to everyone (one byte each); the object is unlinked
  // when `held` goes, once every rank has it open.
  std::vector<char> ok(static_cast<size_t>(n), 0);
  ok[static_cast<size_t>(me)] = problem.empty() ? 1 : 0;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    comm.sendrecv(&ok[static_cast<size_t>(me)], 1, r, &ok[static_cast<size_t>(r)], 1, r, kShmTag);
  }
  const auto bad = std::find(ok.begin(), ok.end(), 0);
  if (bad != ok.end()) {
    BIGBATCH_THROW(IoError, "shared memory for the {} ranks of this host failed on rank {}{}", n,
                   bad - ok.begin(), problem.empty() ? "" : ": " + problem);
  }
  held.kept = true;
  return std::make_unique<PosixSharedSegment>(held.base, slotBytes, n);
}

}  // namespace bigbatch::store_world
