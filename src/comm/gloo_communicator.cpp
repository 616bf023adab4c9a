#include "bigbatch/comm/gloo_communicator.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kErrorBytes = 4096;
// Slot layout: [space: 24 bits][tag: 16 bits][hash of the byte count: 24 bits].
// Space 0 is the error notices'; communicators hash into 1 .. 2^24-1.
constexpr uint64_t kErrorSlot = 0xffffu;
constexpr int kShmTag = 0x7e7e;
constexpr uint32_t kWorldSpace = 1;
// The watcher's receive: Gloo treats a wait that times out as fatal to the
// whole context, so this one waits "forever" (30 days keeps steady_clock's
// nanoseconds far from overflow) and is ended by abortWaitRecv instead.
constexpr milliseconds kForever{30LL * 24 * 3600 * 1000};
// How long an error notice may trail the connection loss it explains, and
// how long a rank that posted notices lets them leave before it closes.
constexpr milliseconds kNoticeGrace{2000};

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// The local address the kernel would use to reach `host` (no packet is
// sent: connect() on a UDP socket only picks the route).
std::string routeAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), "9", &hints, &found);
  BIGBATCH_REQUIRE(rc == 0 && found != nullptr, InvalidArgument,
                   "cannot resolve the store's host '{}' ({}): set MASTER_ADDR to an address "
                   "every rank can reach",
                   host, gai_strerror(rc));
  std::string address;
  for (addrinfo* a = found; a != nullptr && address.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage mine{};
    socklen_t len = sizeof(mine);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = mine.ss_family == AF_INET
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&mine)->sin_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&mine)->sin6_addr);
      if (inet_ntop(mine.ss_family, raw, text, sizeof(text)) != nullptr) address = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  BIGBATCH_REQUIRE(!address.empty(), IoError,
                   "no route from this host to the store's host '{}': set MASTER_ADDR to an "
                   "address every rank can reach, or BIGBATCH_SOCKET_IFNAME to the interface",
                   host);
  return address;
}

gloo::transport::tcp::attr deviceAttr(const GlooOptions& o) {
  gloo::transport::tcp::attr attr;
  if (!o.listenAddress.empty()) {
    attr.hostname = o.listenAddress;
    return attr;
  }
  for (const char* var : {"BIGBATCH_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') {
      attr.iface = v;
      return attr;
    }
  }
  attr.hostname = o.routeTo.empty() ? hostName() : routeAddress(o.routeTo);
  return attr;
}

// Gloo's rendezvous reads and writes through this: our store, its keys
// under a prefix of their own.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(KeyValueStore& store, std::string prefix, milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = store_.get(prefix_ + key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const milliseconds& timeout) override {
    for (const std::string& k : keys) store_.get(prefix_ + k, timeout);
  }

 private:
  KeyValueStore& store_;
  std::string prefix_;
  milliseconds timeout_;
};

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

}  // namespace

// What every communicator of one world shares: the context (its pairs),
// each world rank's host, and the error notices.
struct GlooCommunicator::World {
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::shared_ptr<gloo::transport::Device> device;
  std::vector<std::string> hosts;  // by world rank
  std::string listen;

  std::mutex mutex;  // guards what follows
  std::condition_variable noticed;
  gloo::transport::UnboundBuffer* waiting = nullptr;
  bool failed = false, broken = false;
  int failedRank = -1;
  std::string failure;
  std::deque<std::pair<std::string, std::unique_ptr<gloo::transport::UnboundBuffer>>> notices;

  std::vector<char> inbox = std::vector<char>(kErrorBytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> inboxBuffer;
  std::thread watcher;

  void startWatcher() {
    std::vector<int> others;
    for (int r = 0; r < context->size; ++r) {
      if (r != context->rank) others.push_back(r);
    }
    if (others.empty()) return;
    inboxBuffer = context->createUnboundBuffer(inbox.data(), inbox.size());
    // Every notice is received (so no sender waits on one at its exit); the
    // first one is what the waits report.
    watcher = std::thread([this, others] {
      for (;;) {
        int src = -1;
        try {
          inboxBuffer->recv(others, kErrorSlot);
          if (!inboxBuffer->waitRecv(&src, kForever)) return;  // aborted: shutting down
        } catch (const std::exception&) {
          return;  // the context failed: the waits see it themselves
        }
        std::lock_guard<std::mutex> lock(mutex);
        if (failed) continue;
        failed = true;
        failedRank = src;
        failure.assign(inbox.data(), strnlen(inbox.data(), inbox.size()));
        if (waiting != nullptr) {
          waiting->abortWaitRecv();
          waiting->abortWaitSend();
        }
        noticed.notify_all();
      }
    });
  }

  // A peer that posts a notice and exits closes its connections right
  // after: the notice arrives first (TCP keeps order), but the waiting
  // thread may see the closed connection before the watcher has woken. The
  // notice says why, so it wins if it lands within the grace.
  bool noticeArrives(std::unique_lock<std::mutex>& lock) {
    return noticed.wait_for(lock, kNoticeGrace, [&] { return failed; });
  }

  ~World() {
    // Gloo sends only once the receiver is ready (its watcher always is):
    // give the notices this rank posted a moment to leave before the
    // connections close, so peers learn why instead of only that it left.
    const auto until = Clock::now() + kNoticeGrace;
    for (auto& [text, buffer] : notices) {
      try {
        buffer->waitSend(nullptr, std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(
                                                                 until - Clock::now())));
      } catch (const std::exception&) {
        break;  // that peer is gone, or time is up (the context is closing anyway)
      }
    }
    if (inboxBuffer) inboxBuffer->abortWaitRecv();
    if (watcher.joinable()) watcher.join();
    inboxBuffer.reset();
    notices.clear();
  }

  [[noreturn]] void throwFailure() {
    broken = true;
    BIGBATCH_THROW(MismatchError, "rank {} failed: {}", failedRank, failure);
  }
};

namespace {

class GlooRequest : public Request {
 public:
  GlooRequest(std::shared_ptr<GlooCommunicator::World> world,
              std::unique_ptr<gloo::transport::UnboundBuffer> buffer, int64_t timeoutMs,
              size_t bytes, int peer, int tag, bool isRecv)
      : world_(std::move(world)), buffer_(std::move(buffer)), timeoutMs_(timeoutMs),
        bytes_(bytes), peer_(peer), tag_(tag), isRecv_(isRecv) {}

  void wait() override {
    if (done_) return;
    {
      std::lock_guard<std::mutex> lock(world_->mutex);
      if (world_->failed) world_->throwFailure();
      world_->waiting = buffer_.get();
    }
    bool completed = false;
    std::string failure;
    bool timedOut = false;
    try {
      completed = isRecv_ ? buffer_->waitRecv(nullptr, milliseconds(timeoutMs_))
                          : buffer_->waitSend(nullptr, milliseconds(timeoutMs_));
    } catch (const std::exception& e) {
      failure = e.what();
      timedOut = failure.find("Timed out") != std::string::npos;
    }
    std::unique_lock<std::mutex> lock(world_->mutex);
    world_->waiting = nullptr;
    if (completed) {
      done_ = true;
      return;
    }
    if (failure.empty()) world_->throwFailure();  // aborted by an error notice
    if (!timedOut && world_->noticeArrives(lock)) world_->throwFailure();
    world_->broken = true;
    if (timedOut) {
      BIGBATCH_THROW(TimeoutError,
                     "rank {} did not {} (tag {}, {} bytes) within {} ms; the peer may have "
                     "failed, hung, called another collective, or called it with another size",
                     peer_, isRecv_ ? "send to this rank" : "receive from this rank", tag_,
                     bytes_, timeoutMs_);
    }
    BIGBATCH_THROW(PeerError, "the connection to rank {} failed while this rank waited to {} "
                   "(tag {}, {} bytes): {}",
                   peer_, isRecv_ ? "receive from it" : "send to it", tag_, bytes_,
                   firstLine(failure));
  }

 private:
  static std::string firstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

  std::shared_ptr<GlooCommunicator::World> world_;
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer_;
  int64_t timeoutMs_;
  size_t bytes_;
  int peer_, tag_;
  bool isRecv_;
  bool done_ = false;
};

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

std::unique_ptr<GlooCommunicator> GlooCommunicator::connect(KeyValueStore& store, int rank,
                                                            int size, const GlooOptions& o) {
  BIGBATCH_REQUIRE(size >= 1 && rank >= 0 && rank < size, InvalidArgument,
                   "rank {} of a world of {}: RANK must lie in 0 .. WORLD_SIZE-1", rank, size);
  const auto deadline = Clock::now() + o.timeout;
  const std::string refused = o.keyPrefix + "refused";
  const std::string host = o.hostName.empty() ? hostName() : o.hostName;
  store.set(o.keyPrefix + "rank/" + std::to_string(rank), std::to_string(size) + " " + host);

  // Every rank's world size and host, read back; a disagreement ends every
  // rank at once (the refusal key) instead of leaving some to time out.
  auto world = std::make_shared<World>();
  world->hosts.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    const std::string value = awaitKey(
        store, o.keyPrefix + "rank/" + std::to_string(r), refused, deadline,
        fmt::format("rank {} did not reach the {} within {} ms (this rank is {} of {}): it may "
                    "not have started, or was given another MASTER_ADDR/MASTER_PORT",
                    r, store.describe(), o.timeout.count(), rank, size));
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
    world->hosts[static_cast<size_t>(r)] = value.substr(space + 1);
  }

  const gloo::transport::tcp::attr attr = deviceAttr(o);
  try {
    world->device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    BIGBATCH_THROW(IoError, "cannot listen on '{}{}' for Gloo's TCP transport: {}",
                   attr.iface.empty() ? attr.hostname : "interface ", attr.iface, e.what());
  }
  world->listen = world->device->str();
  world->context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  world->context->setTimeout(std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(
                                                           deadline - Clock::now())));
  GlooStore meshStore(store, o.keyPrefix + "mesh/", o.timeout);
  try {
    world->context->connectFullMesh(meshStore, world->device);
  } catch (const bigbatch::Error&) {
    throw;
  } catch (const std::exception& e) {
    BIGBATCH_THROW(IoError, "connecting rank {} to the other {} rank(s) over Gloo's TCP "
                   "transport (listening on {}) failed: {}",
                   rank, size - 1, world->listen, e.what());
  }
  world->startWatcher();
  std::vector<int> members(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) members[static_cast<size_t>(r)] = r;
  auto comm = std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(std::move(world), std::move(members), kWorldSpace));
  comm->setTimeoutMs(o.timeout.count());
  setErrorRank(rank);
  return comm;
}

GlooCommunicator::GlooCommunicator(std::shared_ptr<World> world, std::vector<int> members,
                                   uint32_t space)
    : world_(std::move(world)), members_(std::move(members)), space_(space) {
  const int me = world_->context->rank;
  rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), me) - members_.begin());
  const std::string& myHost = world_->hosts[static_cast<size_t>(me)];
  hostColor_ = -1;
  localSize_ = 0;
  for (int r = 0; r < size(); ++r) {
    if (world_->hosts[static_cast<size_t>(members_[static_cast<size_t>(r)])] != myHost) continue;
    if (hostColor_ < 0) hostColor_ = r;
    if (r < rank_) ++localRank_;
    ++localSize_;
  }
}

GlooCommunicator::~GlooCommunicator() { releaseSharedSegments(); }

std::string GlooCommunicator::listenDescription() const { return world_->listen; }

bool GlooCommunicator::broken() const {
  std::lock_guard<std::mutex> lock(world_->mutex);
  return world_->broken;
}

int GlooCommunicator::worldRankOf(int peer) const {
  BIGBATCH_REQUIRE(peer >= 0 && peer < size() && peer != rank_, InvalidArgument,
                   "peer {} is not another rank of this communicator of {}", peer, size());
  return members_[static_cast<size_t>(peer)];
}

uint64_t GlooCommunicator::slotFor(int tag, size_t bytes) const {
  BIGBATCH_REQUIRE(tag >= 0 && tag < 0xffff, InvalidArgument,
                   "tag {} outside 0 .. 65534, the range Gloo's slots carry", tag);
  return (uint64_t{space_} << 40) | (uint64_t(tag) << 24) | (mix64(bytes) & 0xffffffu);
}

std::unique_ptr<Request> GlooCommunicator::isend(const void* data, size_t bytes, int peer,
                                                 int tag) {
  const int to = worldRankOf(peer);
  auto buffer = world_->context->createUnboundBuffer(const_cast<void*>(data), bytes);
  try {
    buffer->send(to, slotFor(tag, bytes), 0, bytes);
  } catch (const gloo::Exception& e) {
    BIGBATCH_THROW(PeerError, "the connection to rank {} failed before this rank could send to it "
                   "(tag {}, {} bytes): {}",
                   peer, tag, bytes, e.what());
  }
  return std::make_unique<GlooRequest>(world_, std::move(buffer), timeoutMs(), bytes, peer, tag,
                                       false);
}

std::unique_ptr<Request> GlooCommunicator::irecv(void* data, size_t bytes, int peer, int tag) {
  const int from = worldRankOf(peer);
  auto buffer = world_->context->createUnboundBuffer(data, bytes);
  try {
    buffer->recv(from, slotFor(tag, bytes), 0, bytes);
  } catch (const gloo::Exception& e) {
    BIGBATCH_THROW(PeerError, "the connection to rank {} failed before this rank could receive from "
                   "it (tag {}, {} bytes): {}",
                   peer, tag, bytes, e.what());
  }
  return std::make_unique<GlooRequest>(world_, std::move(buffer), timeoutMs(), bytes, peer, tag,
                                       true);
}

std::unique_ptr<Communicator> GlooCommunicator::split(int color, int key) {
  // Every rank's (colour, key), passed round a ring: n-1 steps of one entry.
  const int n = size();
  std::vector<int64_t> entries(static_cast<size_t>(2 * n), 0);
  entries[static_cast<size_t>(2 * rank_)] = color;
  entries[static_cast<size_t>(2 * rank_ + 1)] = key;
  constexpr int kSplitTag = 0x7e7d;
  for (int step = 0; step < n - 1; ++step) {
    const int sendIndex = (rank_ - step + n) % n;
    const int recvIndex = (rank_ - step - 1 + n) % n;
    sendrecv(&entries[static_cast<size_t>(2 * sendIndex)], 2 * sizeof(int64_t), (rank_ + 1) % n,
             &entries[static_cast<size_t>(2 * recvIndex)], 2 * sizeof(int64_t),
             (rank_ - 1 + n) % n, kSplitTag);
  }
  std::vector<std::pair<int64_t, int>> mine;  // (key, rank) of this colour
  for (int r = 0; r < n; ++r) {
    if (entries[static_cast<size_t>(2 * r)] == color) {
      mine.emplace_back(entries[static_cast<size_t>(2 * r + 1)], r);
    }
  }
  std::sort(mine.begin(), mine.end());
  std::vector<int> members;
  for (const auto& [k, r] : mine) members.push_back(members_[static_cast<size_t>(r)]);
  const uint64_t h = mix64((uint64_t{space_} << 32) ^ mix64(++splits_) ^ mix64(uint64_t(color) + 7));
  const uint32_t space = 1 + static_cast<uint32_t>(h % 0xfffffeu);  // 1 .. 2^24-2
  auto child = std::unique_ptr<GlooCommunicator>(new GlooCommunicator(world_, members, space));
  child->setTimeoutMs(timeoutMs());
  return child;
}

void GlooCommunicator::postError(const std::string& message) {
  std::lock_guard<std::mutex> lock(world_->mutex);
  for (int r = 0; r < size(); ++r) {
    if (r == rank_) continue;
    std::string text = message.substr(0, kErrorBytes - 1);
    text.resize(kErrorBytes, '\0');
    world_->notices.emplace_back(std::move(text), nullptr);
    auto& [bytes, buffer] = world_->notices.back();
    buffer = world_->context->createUnboundBuffer(bytes.data(), bytes.size());
    try {
      buffer->send(members_[static_cast<size_t>(r)], kErrorSlot);
    } catch (const std::exception&) {
      // Best effort: that peer's connection is gone already.
    }
  }
}

void GlooCommunicator::pollPeerErrors() {
  std::lock_guard<std::mutex> lock(world_->mutex);
  if (world_->failed) world_->throwFailure();
}

std::unique_ptr<SharedSegment> GlooCommunicator::allocateShared(size_t slotBytes) {
  BIGBATCH_REQUIRE(localSize_ == size(), InvalidArgument,
                   "shared memory on a communicator whose {} ranks span more than one host",
                   size());
  slotBytes = (std::max<size_t>(slotBytes, 64) + 63) / 64 * 64;  // no two slots share a line
  const size_t total = slotBytes * static_cast<size_t>(size());
  // The first rank names and makes the object; the others open it; once all
  // report, it is unlinked, so nothing outlives the processes.
  char name[64] = {};
  std::snprintf(name, sizeof(name), "/bigbatch-%d-%u-%llu", static_cast<int>(getpid()), space_,
                static_cast<unsigned long long>(++segments_));
  std::string problem;
  uint8_t* base = nullptr;
  int fd = -1;
  if (rank_ == 0) {
    struct statvfs fs {};
    if (statvfs("/dev/shm", &fs) == 0 && fs.f_bavail * fs.f_frsize < total) {
      problem = fmt::format("/dev/shm has {} MiB free, the shared phase needs {} MiB (a "
                            "container's default 64 MiB? start it with a larger --shm-size)",
                            fs.f_bavail * fs.f_frsize >> 20, total >> 20);
    } else if ((fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600)) < 0 ||
               ftruncate(fd, static_cast<off_t>(total)) != 0 ||
               (base = mapShared(fd, total)) == nullptr) {
      problem = fmt::format("making shared memory {} of {} bytes: {}", name, total,
                            std::strerror(errno));
    }
    for (int r = 1; r < size(); ++r) send(name, sizeof(name), r, kShmTag);
  } else {
    recv(name, sizeof(name), 0, kShmTag);
    if ((fd = shm_open(name, O_RDWR, 0600)) < 0 || (base = mapShared(fd, total)) == nullptr) {
      problem = fmt::format("opening shared memory {}: {}", name, std::strerror(errno));
    }
  }
  if (fd >= 0) close(fd);
  // Everyone's outcome to everyone (one byte each), then the unlink.
  std::vector<char> ok(static_cast<size_t>(size()), 0);
  ok[static_cast<size_t>(rank_)] = problem.empty() ? 1 : 0;
  for (int r = 0; r < size(); ++r) {
    if (r == rank_) continue;
    sendrecv(&ok[static_cast<size_t>(rank_)], 1, r, &ok[static_cast<size_t>(r)], 1, r, kShmTag);
  }
  if (rank_ == 0) shm_unlink(name);
  const auto bad = std::find(ok.begin(), ok.end(), 0);
  if (bad != ok.end()) {
    if (base != nullptr) munmap(base, total);
    BIGBATCH_THROW(IoError, "shared memory for the {} ranks of this host failed on rank {}{}",
                   size(), bad - ok.begin(), problem.empty() ? "" : ": " + problem);
  }
  return std::make_unique<PosixSharedSegment>(base, slotBytes, size());
}

}  // namespace bigbatch
