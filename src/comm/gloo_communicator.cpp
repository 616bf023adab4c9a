#include "bigbatch/comm/gloo_communicator.h"

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
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "bigbatch/common/error.h"
#include "gloo_setup.h"
#include "store_world.h"

namespace bigbatch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kErrorBytes = 4096;
// Slot layout: [space: 24 bits][tag: 16 bits][the byte count, or a flag bit
// and its hash: 24 bits] (slotFor). Space 0 is the error notices'; the
// world's is 1, its splits' 2 .. 2^24-2.
constexpr uint64_t kErrorSlot = 0xffffu;
constexpr uint32_t kWorldSpace = 1;
// The watcher's receive: Gloo treats a wait that times out as fatal to the
// whole context, so this one waits "forever" (30 days keeps steady_clock's
// nanoseconds far from overflow) and is ended by abortWaitRecv instead.
constexpr milliseconds kForever{30LL * 24 * 3600 * 1000};
// How long an error notice may trail the connection loss it explains, and
// how long a rank that posted notices lets them leave before it closes.
constexpr milliseconds kNoticeGrace{2000};

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
  // The wait in progress and its deadline. Gloo's own timeout would close
  // every pair of the context (and with them the error notices this rank
  // is about to send), so the deadline is kept here: the timer thread
  // aborts the wait instead.
  gloo::transport::UnboundBuffer* waiting = nullptr;
  std::vector<bool> closed;  // by world rank: the pair this rank closed (~GlooRequest)
  Clock::time_point deadline;
  bool deadlinePassed = false, stopping = false;
  std::condition_variable timerWake;
  std::thread timer;
  bool failed = false, broken = false;
  int failedRank = -1;
  std::string failure;
  std::deque<std::pair<std::string, std::unique_ptr<gloo::transport::UnboundBuffer>>> notices;

  std::vector<char> inbox = std::vector<char>(kErrorBytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> inboxBuffer;
  std::thread watcher;

  void startTimer() {
    timer = std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex);
      while (!stopping) {
        if (waiting == nullptr) {
          timerWake.wait(lock);
        } else if (timerWake.wait_until(lock, deadline) == std::cv_status::timeout &&
                   waiting != nullptr && Clock::now() >= deadline) {
          deadlinePassed = true;
          waiting->abortWaitRecv();
          waiting->abortWaitSend();
          waiting = nullptr;
        }
      }
    });
  }

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
        // That peer is gone (its pair closed): the others may still take theirs.
      }
    }
    if (inboxBuffer) inboxBuffer->abortWaitRecv();
    if (watcher.joinable()) watcher.join();
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
      timerWake.notify_all();
    }
    if (timer.joinable()) timer.join();
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
              size_t bytes, int peer, int worldPeer, int tag, bool isRecv)
      : world_(std::move(world)), buffer_(std::move(buffer)), timeoutMs_(timeoutMs),
        bytes_(bytes), peer_(peer), worldPeer_(worldPeer), tag_(tag), isRecv_(isRecv) {}

  // Abandoned before it completed (a wait failed, or was never made): Gloo
  // keeps the operation queued on its pair with only a weak pointer to the
  // buffer, and would then stall that pair for good (and spin its event
  // loop). Closing the pair ends that: the peer's next wait on it fails.
  ~GlooRequest() override {
    if (done_) return;
    {
      std::lock_guard<std::mutex> lock(world_->mutex);
      world_->broken = true;
      world_->closed[static_cast<size_t>(worldPeer_)] = true;
    }
    try {
      world_->context->getPair(worldPeer_)->close();
    } catch (const std::exception&) {
      // closed already
    }
  }

  bool test() override {
    if (done_) return true;
    BIGBATCH_THROW(InvalidArgument,
                   "a request polled over Gloo's transport (rank {}, tag {}): Gloo cannot test "
                   "an operation without waiting for it; use BIGBATCH_TRANSPORT=ucx (the "
                   "default) or mpirun",
                   peer_, tag_);
  }

  void wait() override {
    if (done_) return;
    {
      std::lock_guard<std::mutex> lock(world_->mutex);
      if (world_->failed) world_->throwFailure();
      // A pair this rank closed signals nothing to what is still queued on
      // it: fail here rather than at the deadline.
      BIGBATCH_REQUIRE(!world_->closed[static_cast<size_t>(worldPeer_)], PeerError,
                       "the connection to rank {} was closed after an earlier failure (waited "
                       "to {} tag {}, {} bytes)",
                       peer_, isRecv_ ? "receive" : "send", tag_, bytes_);
      world_->waiting = buffer_.get();
      world_->deadline = Clock::now() + milliseconds(timeoutMs_);
      world_->deadlinePassed = false;
      world_->timerWake.notify_all();
    }
    bool completed = false;
    std::string failure;
    try {
      completed = isRecv_ ? buffer_->waitRecv(nullptr, kForever)
                          : buffer_->waitSend(nullptr, kForever);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    std::unique_lock<std::mutex> lock(world_->mutex);
    world_->waiting = nullptr;
    const bool timedOut = world_->deadlinePassed;
    world_->deadlinePassed = false;
    if (completed) {
      done_ = true;
      return;
    }
    if (world_->failed) world_->throwFailure();  // aborted by an error notice
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
  int peer_, worldPeer_, tag_;
  bool isRecv_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<GlooCommunicator> GlooCommunicator::connect(KeyValueStore& store, int rank,
                                                            int size, const GlooOptions& o) {
  const auto deadline = Clock::now() + o.timeout;
  setErrorRank(rank);  // a refusal while connecting names this rank, not 0
  auto world = std::make_shared<World>();
  world->hosts = store_world::meet(store, rank, size, o.keyPrefix,
                                   o.hostName.empty() ? store_world::thisHostName() : o.hostName,
                                   o.timeout);

  const gloo::transport::tcp::attr attr = gloo_setup::deviceAttr(o);
  // Debian maps a host's own name to 127.0.1.1: a MASTER_ADDR that names
  // this host would have it listen where no other host can reach it.
  const bool loopback = o.listenAddress.empty() && attr.iface.empty() &&
                        (attr.hostname.rfind("127.", 0) == 0 ||
                                               attr.hostname == "::1" ||
                                               attr.hostname == "localhost");
  std::string refusal;
  if (loopback && std::any_of(world->hosts.begin(), world->hosts.end(),
                              [&](const std::string& h) { return h != world->hosts[0]; })) {
    refusal = fmt::format(
        "rank {}: Gloo's transport would listen on the loopback address {} (the route to "
        "MASTER_ADDR '{}'), which ranks on other hosts cannot reach: set MASTER_ADDR to an "
        "address of the network between the hosts, or BIGBATCH_SOCKET_IFNAME to its interface",
        rank, attr.hostname, o.routeTo);
  }
  // Every rank's verdict to every rank, so that all refuse together instead
  // of the others waiting out the rendezvous for the one that refused.
  store.set(fmt::format("{}listen/{}", o.keyPrefix, rank), refusal);
  for (int r = 0; r < size; ++r) {
    const std::string theirs = store.get(fmt::format("{}listen/{}", o.keyPrefix, r), o.timeout);
    BIGBATCH_REQUIRE(theirs.empty(), InvalidArgument, "{}", theirs);
  }
  try {
    world->device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    BIGBATCH_THROW(IoError, "cannot listen on '{}{}' for Gloo's TCP transport: {}",
                   attr.iface.empty() ? attr.hostname : "interface ", attr.iface, e.what());
  }
  world->listen = world->device->str();
  world->closed.assign(static_cast<size_t>(size), false);
  world->context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  world->context->setTimeout(std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(
                                                           deadline - Clock::now())));
  gloo_setup::RendezvousStore meshStore(store, o.keyPrefix + "mesh/", o.timeout);
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
  world->startTimer();
  std::vector<int> members(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) members[static_cast<size_t>(r)] = r;
  auto comm = std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(std::move(world), std::move(members), kWorldSpace));
  comm->setTimeoutMs(o.timeout.count());
  return comm;
}

GlooCommunicator::GlooCommunicator(std::shared_ptr<World> world, std::vector<int> members,
                                   uint32_t space)
    : world_(std::move(world)), members_(std::move(members)), space_(space) {
  const store_world::HostLayout l =
      store_world::hostLayout(world_->hosts, members_, world_->context->rank);
  rank_ = l.rank;
  hostColor_ = l.color;
  localRank_ = l.localRank;
  localSize_ = l.localSize;
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
  const int world = members_[static_cast<size_t>(peer)];
  std::lock_guard<std::mutex> lock(world_->mutex);
  BIGBATCH_REQUIRE(!world_->closed[static_cast<size_t>(world)], PeerError,
                   "the connection to rank {} was closed after an earlier failure", peer);
  return world;
}

uint64_t GlooCommunicator::slotFor(int tag, size_t bytes) const {
  BIGBATCH_REQUIRE(tag >= 0 && tag < 0xffff, InvalidArgument,
                   "tag {} outside 0 .. 65534, the range Gloo's slots carry", tag);
  // The byte count itself below 8 MiB (a message of another size has another
  // slot); above, a flag bit and a 23-bit hash of it, where two sizes may
  // share a slot (and Gloo would then abort on the longer one).
  const uint64_t size = bytes < (1u << 23) ? bytes : (1u << 23) | (store_world::mix64(bytes) & 0x7fffffu);
  return (uint64_t{space_} << 40) | (uint64_t(tag) << 24) | size;
}

std::unique_ptr<Request> GlooCommunicator::post(void* data, size_t bytes, int peer, int tag,
                                               bool isRecv) {
  const int other = worldRankOf(peer);
  auto buffer = world_->context->createUnboundBuffer(data, bytes);
  try {
    if (isRecv) {
      buffer->recv(other, slotFor(tag, bytes), 0, bytes);
    } else {
      buffer->send(other, slotFor(tag, bytes), 0, bytes);
    }
  } catch (const std::exception& e) {  // gloo::Exception, or an EnforceNotMet from its pair
    BIGBATCH_THROW(PeerError, "the connection to rank {} failed before this rank could {} it "
                   "(tag {}, {} bytes): {}",
                   peer, isRecv ? "receive from" : "send to", tag, bytes, e.what());
  }
  return std::make_unique<GlooRequest>(world_, std::move(buffer), timeoutMs(), bytes, peer, other,
                                       tag, isRecv);
}

std::unique_ptr<Request> GlooCommunicator::isend(const void* data, size_t bytes, int peer,
                                                 int tag) {
  return post(const_cast<void*>(data), bytes, peer, tag, /*isRecv=*/false);  // Gloo only reads it
}

std::unique_ptr<Request> GlooCommunicator::irecv(void* data, size_t bytes, int peer, int tag) {
  return post(data, bytes, peer, tag, /*isRecv=*/true);
}

std::unique_ptr<Communicator> GlooCommunicator::split(int color, int key) {
  std::vector<int> members = store_world::splitMembers(*this, members_, color, key);
  const uint32_t space = store_world::childSpace(space_, ++splits_, color, 1u << 24);
  auto child = std::unique_ptr<GlooCommunicator>(
      new GlooCommunicator(world_, std::move(members), space));
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
      world_->notices.pop_back();  // best effort: that peer's connection is gone already
    }
  }
}

void GlooCommunicator::pollPeerErrors() {
  std::lock_guard<std::mutex> lock(world_->mutex);
  if (world_->failed) world_->throwFailure();
}

std::unique_ptr<SharedSegment> GlooCommunicator::allocateShared(size_t slotBytes) {
  return store_world::allocatePosixShared(
      *this, slotBytes,
      fmt::format("/bigbatch-{}-{}-{}", getpid(), space_, ++segments_));
}

}  // namespace bigbatch
