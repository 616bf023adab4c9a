#include "bigbatch/comm/ucx_communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>

#include <ucp/api/ucp.h>

#include "bigbatch/comm/peer_wait.h"
#include "bigbatch/common/error.h"
#include "store_world.h"
#include "ucx_world.h"

namespace bigbatch {
namespace {

using namespace ucx;

class UcxRequest : public Request {
 public:
  UcxRequest(std::shared_ptr<UcxCommunicator::World> world, UcxCommunicator* comm, size_t bytes,
             int peer, int worldPeer, int tag, bool isRecv)
      : world_(std::move(world)), comm_(comm), bytes_(bytes), peer_(peer), worldPeer_(worldPeer),
        tag_(tag), isRecv_(isRecv) {}

  // The operation's request (nullptr: a send that completed at once).
  void start(ucs_status_ptr_t request) { request_ = request; }

  // Abandoned unfinished (a wait failed): the buffer may be freed next, so
  // the operation must end first. ucp_request_cancel ends only a receive not
  // yet matched; a send, or a matched receive, ends when its endpoint is
  // closed by force. If even that does not end it, the world is poisoned.
  ~UcxRequest() override {
    if (request_ == nullptr) return;
    UcxCommunicator::World& w = *world_;
    if (w.poisoned) {  // the worker is not progressed again
      ucp_request_free(request_);
      return;
    }
    ucp_request_cancel(w.worker, request_);
    auto settle = [&](milliseconds limit) {
      return progressUntil(w.worker, request_, Clock::now() + limit);
    };
    if (!settle(milliseconds(200))) {
      // Only closing an endpoint by force ends it: the world has failed.
      // (A receive cancelled cleanly leaves it whole: a peer that ended
      // normally may still be told so.)
      w.broken = true;
      // A receive from any source has no endpoint to close: it is settled
      // or the worker is poisoned.
      ucp_ep_h& ep = worldPeer_ >= 0 ? w.endpoints[static_cast<size_t>(worldPeer_)] : noEndpoint_;
      if (ep != nullptr) {
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        p.flags = UCP_EP_CLOSE_FLAG_FORCE;
        ucs_status_ptr_t closing = ucp_ep_close_nbx(ep, &p);
        ep = nullptr;
        if (w.peerStatus[static_cast<size_t>(worldPeer_)] == UCS_OK) {
          w.peerStatus[static_cast<size_t>(worldPeer_)] = UCS_ERR_CANCELED;
        }
        if (closing != nullptr && !UCS_PTR_IS_ERR(closing)) {
          progressUntil(w.worker, closing, Clock::now() + milliseconds(200));
          ucp_request_free(closing);
        }
      }
      if (!settle(milliseconds(200))) w.poisoned = true;
    }
    ucp_request_free(request_);
  }

  void wait() override {
    if (request_ == nullptr) return;
    checkUsable();
    const auto deadline = Clock::now() + milliseconds(comm_->timeoutMs());
    PeerWait idle;
    ucp_tag_recv_info_t info{};
    ucs_status_t status = UCS_INPROGRESS;
    for (;;) {
      ucp_worker_progress(world_->worker);
      status = poll(info);
      if (status != UCS_INPROGRESS) break;
      if ((idle.polls() & 63) == 63) {
        checkPeer();
        status = poll(info);  // (done during checkPeer's progress: not a timeout)
        if (status != UCS_INPROGRESS) break;
        if (Clock::now() > deadline) {
          world_->broken = true;
          BIGBATCH_THROW(TimeoutError,
                         "{} did not {} (tag {}, {} bytes) within {} ms; the peer may have "
                         "failed, hung, or called another collective",
                         peerName(), isRecv_ ? "send to this rank" : "receive from this rank",
                         tag_, bytes_, comm_->timeoutMs());
        }
      }
      idle.idle();
    }
    finish(status, info);
  }

  bool test() override {
    if (request_ == nullptr) return true;
    checkUsable();
    ucp_worker_progress(world_->worker);
    ucp_tag_recv_info_t info{};
    const ucs_status_t status = poll(info);
    if (status == UCS_INPROGRESS) {
      checkPeer();
      return false;
    }
    finish(status, info);
    return true;
  }

  int source() const override { return peer_; }

 private:
  std::string peerName() const {
    return peer_ >= 0 ? fmt::format("rank {}", peer_) : std::string("no rank");
  }
  void checkUsable() const {
    BIGBATCH_REQUIRE(!world_->poisoned, PeerError,
                     "UCX's worker is unusable after an earlier failure; waited for {} "
                     "(tag {}, {} bytes)",
                     peerName(), tag_, bytes_);
  }
  ucs_status_t poll(ucp_tag_recv_info_t& info) {
    return isRecv_ ? ucp_tag_recv_request_test(request_, &info)
                   : ucp_request_check_status(request_);
  }
  // A peer's notice, or the peer's connection failed (a receive is not tied
  // to an endpoint: UCX fails it for no peer).
  void checkPeer() {
    world_->throwNotice();
    if (worldPeer_ < 0) return;
    // A peer that said goodbye had finished every send it started (an
    // unfinished one breaks its world: no goodbye), so what is still
    // pending with it never ends, though UCX may not see its endpoint go
    // (two workers of one process, over shared memory).
    const ucs_status_t peer = world_->peerStatus[static_cast<size_t>(worldPeer_)];
    if (peer != UCS_OK || world_->saidGoodbye(worldPeer_, /*rounds=*/1)) {
      // What the peer sent before it ended may still be landing (the last
      // fragment of a large message, processed after the goodbye was
      // read): a grace, counted from when this request first saw it, while
      // the caller goes on polling (the communication thread is not held).
      const auto now = Clock::now();
      if (!peerEndSeen_) peerEndSeen_ = now;
      if (now - *peerEndSeen_ < kPeerEndGrace) return;
      ucp_tag_recv_info_t info{};
      if (poll(info) != UCS_INPROGRESS) return;  // done in the progress just made
      world_->throwPeerFailure(worldPeer_, peer_, waitingFor(), peer);
    }
  }
  void finish(ucs_status_t status, const ucp_tag_recv_info_t& info) {
    ucp_request_free(request_);
    request_ = nullptr;
    if (isRecv_ && peer_ < 0 && status == UCS_OK) {
      worldPeer_ = sourceOf(info.sender_tag);
      peer_ = comm_->rankOfWorldRank(worldPeer_);
    }
    if (status == UCS_OK && (!isRecv_ || info.length == bytes_)) return;
    if (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED) {
      world_->broken = true;
      throwSizeMismatch(status, info.length);
    }
    // (a peer that ended normally leaves this world usable with the others)
    if (worldPeer_ >= 0) world_->throwPeerFailure(worldPeer_, peer_, waitingFor(), status);
    world_->broken = true;
    world_->throwNotice();  // a peer that said why it failed, then left
    BIGBATCH_THROW(PeerError, "a receive from any source failed (tag {}, {} bytes): {}", tag_,
                   bytes_, ucs_status_string(status));
  }
  std::string waitingFor() const {
    return fmt::format("while this rank waited to {} it (tag {}, {} bytes)",
                       isRecv_ ? "receive from" : "send to", tag_, bytes_);
  }

  [[noreturn]] void throwSizeMismatch(ucs_status_t status, size_t length) const {
    BIGBATCH_THROW(MismatchError,
                   "message from {} (tag {}) {} than the {} bytes this rank expected: the "
                   "ranks called the collective with different sizes or types",
                   peerName(), tag_,
                   status == UCS_OK ? fmt::format("holds {} bytes, fewer", length)
                                    : std::string("is larger"),
                   bytes_);
  }

  std::shared_ptr<UcxCommunicator::World> world_;
  UcxCommunicator* comm_;
  ucp_ep_h noEndpoint_ = nullptr;  // a receive from any source's (none)
  std::optional<Clock::time_point> peerEndSeen_;  // the peer's end or failure, first seen
  ucs_status_ptr_t request_ = nullptr;
  size_t bytes_;
  int peer_, worldPeer_, tag_;
  bool isRecv_;
};

}  // namespace

void UcxCommunicator::setTcpSegmentDefaults() {
  // TCP segments of 256 KiB, send and receive, unless the user chose either
  // (UCX refuses a send segment larger than the receive one, so one of ours
  // beside one of theirs could stop it). With UCX's 8 KiB send and 64 KiB
  // receive segments a message of 64-512 KiB crosses in several, and the
  // allreduce ran below the 10 Gb/s link from 128 KiB to 512 KiB (0.89-0.96
  // of bigbatch on MPI); with 256 KiB, at 0.98-1.02 of it
  // (docs/BENCHMARKS.md, "Without MPI"). In the environment, not through
  // ucp_config_modify: UCX 1.13 accepted these names there without an
  // error, and the same A/B then ran as with UCX's own segments. The
  // process keeps them (and its children inherit them), as if the user had
  // set them.
  if (std::getenv("UCX_TCP_TX_SEG_SIZE") == nullptr &&
      std::getenv("UCX_TCP_RX_SEG_SIZE") == nullptr) {
    setenv("UCX_TCP_TX_SEG_SIZE", "256k", /*overwrite=*/0);
    setenv("UCX_TCP_RX_SEG_SIZE", "256k", /*overwrite=*/0);
  }
}

std::unique_ptr<UcxCommunicator> UcxCommunicator::connect(KeyValueStore& store, int rank, int size,
                                                          const UcxOptions& o) {
  // First, before this process's other ranks (tests run them as threads)
  // can read the environment in UCX.
  static std::once_flag segmentDefaults;
  std::call_once(segmentDefaults, setTcpSegmentDefaults);
  setErrorRank(rank);  // a refusal while connecting names this rank, not 0
  auto world = std::make_shared<World>();
  world->rank = rank;
  world->hosts = store_world::meet(store, rank, size, o.keyPrefix,
                                   o.hostName.empty() ? store_world::thisHostName() : o.hostName,
                                   o.timeout);
  world->peerStatus.assign(static_cast<size_t>(size), UCS_OK);
  world->endpoints.assign(static_cast<size_t>(size), nullptr);

  ucp_config_t* config = nullptr;
  checkUcs(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  // Eager messages at every size, unless the user chose (UCX_RNDV_THRESH):
  // over TCP, UCX's rendezvous costs a round trip per message, and eager
  // sends made bigbatch's allreduces faster at every size measured, 16 KiB
  // to 64 MiB, on the emulated 10 Gb/s link (docs/BENCHMARKS.md, "Without
  // MPI"). The price: a message that arrives before its receive is posted
  // is held whole in UCX's unexpected queue (rendezvous would hold only its
  // header), and a send completes before the peer receives it. The
  // collectives' messages are bounded by their tensors; docs/TORCH_BACKEND.md
  // says how to get rendezvous back for large point-to-point transfers.
  ucs_status_t tuned = UCS_OK;
  if (std::getenv("UCX_RNDV_THRESH") == nullptr) {
    tuned = ucp_config_modify(config, "RNDV_THRESH", "inf");
  }
  if (tuned != UCS_OK) ucp_config_release(config);
  checkUcs(tuned, "ucp_config_modify(RNDV_THRESH)");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  params.features = UCP_FEATURE_TAG;
  params.estimated_num_eps = static_cast<size_t>(size);
  const ucs_status_t initStatus = ucp_init(&params, config, &world->context);
  ucp_config_release(config);
  checkUcs(initStatus, "ucp_init");
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  checkUcs(ucp_worker_create(world->context, &wp, &world->worker), "ucp_worker_create");

  ucp_address_t* address = nullptr;
  size_t addressBytes = 0;
  checkUcs(ucp_worker_get_address(world->worker, &address, &addressBytes), "ucp_worker_get_address");
  store.set(o.keyPrefix + "ucx/" + std::to_string(rank),
            std::string(reinterpret_cast<const char*>(address), addressBytes));
  ucp_worker_release_address(world->worker, address);
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    const std::string theirs = store.get(o.keyPrefix + "ucx/" + std::to_string(r), o.timeout);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(theirs.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = onPeerError;
    ep.err_handler.arg = world.get();
    const ucs_status_t made =
        ucp_ep_create(world->worker, &ep, &world->endpoints[static_cast<size_t>(r)]);
    // UCX finds no transport to rank r that reports a peer's failure, which
    // bigbatch asks for (UCP_ERR_HANDLING_MODE_PEER) to name failed ranks:
    // UCX's shared-memory transports do not, so UCX_TLS without tcp ends here.
    BIGBATCH_REQUIRE(made == UCS_OK, IoError,
                     "UCX could not reach rank {} ({}): bigbatch needs a UCX transport to it "
                     "that reports a peer's failure, as TCP does; UCX_TLS is {} (include tcp "
                     "where it is set) and UCX_NET_DEVICES {}; BIGBATCH_TRANSPORT=gloo avoids UCX",
                     r, ucs_status_string(made),
                     std::getenv("UCX_TLS") ? std::getenv("UCX_TLS") : "unset",
                     std::getenv("UCX_NET_DEVICES") ? std::getenv("UCX_NET_DEVICES") : "unset");
  }
  std::vector<int> members(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) members[static_cast<size_t>(r)] = r;
  auto comm = std::unique_ptr<UcxCommunicator>(
      new UcxCommunicator(std::move(world), std::move(members), kWorldSpace));
  comm->setTimeoutMs(o.timeout.count());
  comm->barrier();  // every endpoint wired up, or the failure named now
  return comm;
}

UcxCommunicator::UcxCommunicator(std::shared_ptr<World> world, std::vector<int> members,
                                 uint32_t space)
    : world_(std::move(world)), members_(std::move(members)), space_(space) {
  const store_world::HostLayout l = store_world::hostLayout(world_->hosts, members_, world_->rank);
  rank_ = l.rank;
  hostColor_ = l.color;
  localRank_ = l.localRank;
  localSize_ = l.localSize;
}

UcxCommunicator::~UcxCommunicator() { releaseSharedSegments(); }

bool UcxCommunicator::broken() const { return world_->broken; }

int UcxCommunicator::worldRankOf(int peer) const {
  BIGBATCH_REQUIRE(peer >= 0 && peer < size() && peer != rank_, InvalidArgument,
                   "peer {} is not another rank of this communicator of {}", peer, size());
  const int world = members_[static_cast<size_t>(peer)];
  if (world_->peerStatus[static_cast<size_t>(world)] != UCS_OK) {
    world_->throwPeerFailure(world, peer, "earlier, before this rank's exchange with it",
                             world_->peerStatus[static_cast<size_t>(world)]);
  }
  return world;
}

std::unique_ptr<Request> UcxCommunicator::isend(const void* data, size_t bytes, int peer, int tag) {
  BIGBATCH_REQUIRE(tag >= 0 && tag < kErrorTag, InvalidArgument,
                   "tag {} outside 0 .. 65534, the range UCX tags carry here", tag);
  const int to = worldRankOf(peer);
  ucp_request_param_t p = contiguousBytes();
  ucs_status_ptr_t r = ucp_tag_send_nbx(world_->endpoints[static_cast<size_t>(to)], data, bytes,
                                        tagOf(space_, world_->rank, tag), &p);
  if (UCS_PTR_IS_ERR(r)) {
    world_->broken = true;
    BIGBATCH_THROW(PeerError, "the connection to rank {} failed before this rank could send to "
                   "it (tag {}, {} bytes): {}",
                   peer, tag, bytes, ucs_status_string(UCS_PTR_STATUS(r)));
  }
  auto request = std::make_unique<UcxRequest>(world_, this, bytes, peer, to, tag, false);
  request->start(r);
  return request;
}

std::unique_ptr<Request> UcxCommunicator::irecv(void* data, size_t bytes, int peer, int tag) {
  BIGBATCH_REQUIRE(tag >= 0 && tag < kErrorTag, InvalidArgument,
                   "tag {} outside 0 .. 65534, the range UCX tags carry here", tag);
  const int from = worldRankOf(peer);
  auto request = std::make_unique<UcxRequest>(world_, this, bytes, peer, from, tag, true);
  ucp_request_param_t p = contiguousBytes();
  // Always a request, so that its test tells the message's length (a
  // receive completed at once would say nothing of it).
  p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  ucs_status_ptr_t r = ucp_tag_recv_nbx(world_->worker, data, bytes, tagOf(space_, from, tag),
                                        kFullMask, &p);
  if (UCS_PTR_IS_ERR(r)) {
    world_->broken = true;
    BIGBATCH_THROW(PeerError, "the connection to rank {} failed before this rank could receive "
                   "from it (tag {}, {} bytes): {}",
                   peer, tag, bytes, ucs_status_string(UCS_PTR_STATUS(r)));
  }
  request->start(r);
  return request;
}

std::unique_ptr<Request> UcxCommunicator::irecvAny(void* data, size_t bytes, int tag) {
  BIGBATCH_REQUIRE(tag >= 0 && tag < kErrorTag, InvalidArgument,
                   "tag {} outside 0 .. 65534, the range UCX tags carry here", tag);
  auto request = std::make_unique<UcxRequest>(world_, this, bytes, -1, -1, tag, true);
  ucp_request_param_t p = contiguousBytes();
  p.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  ucs_status_ptr_t r =
      ucp_tag_recv_nbx(world_->worker, data, bytes, tagOf(space_, 0, tag), ~kSenderBits, &p);
  if (UCS_PTR_IS_ERR(r)) {
    world_->broken = true;
    BIGBATCH_THROW(PeerError, "UCX refused a receive from any source (tag {}, {} bytes): {}", tag,
                   bytes, ucs_status_string(UCS_PTR_STATUS(r)));
  }
  request->start(r);
  return request;
}

int UcxCommunicator::rankOfWorldRank(int world) const {
  for (size_t r = 0; r < members_.size(); ++r) {
    if (members_[r] == world) return static_cast<int>(r);
  }
  return -1;
}

std::unique_ptr<Communicator> UcxCommunicator::split(int color, int key) {
  std::vector<int> members = store_world::splitMembers(*this, members_, color, key);
  const uint32_t space = store_world::childSpace(space_, ++splits_, color, kSpaces);
  auto child =
      std::unique_ptr<UcxCommunicator>(new UcxCommunicator(world_, std::move(members), space));
  child->setTimeoutMs(timeoutMs());
  return child;
}

void UcxCommunicator::postError(const std::string& message) {
  world_->notices.push_back(message.substr(0, kErrorBytes));
  const std::string& text = world_->notices.back();
  for (int r = 0; r < size(); ++r) {
    const int to = members_[static_cast<size_t>(r)];
    if (r == rank_ || world_->peerStatus[static_cast<size_t>(to)] != UCS_OK) continue;
    ucp_request_param_t p = contiguousBytes();
    ucs_status_ptr_t s = ucp_tag_send_nbx(world_->endpoints[static_cast<size_t>(to)], text.data(),
                                          text.size(), tagOf(0, world_->rank, kErrorTag), &p);
    if (s != nullptr && !UCS_PTR_IS_ERR(s)) world_->noticeRequests.push_back(s);
  }
  // The caller may end the process right after (endJob): let the notices go.
  const auto until = Clock::now() + milliseconds(200);
  for (void* r : world_->noticeRequests) {
    if (!world_->poisoned) progressUntil(world_->worker, r, until);
  }
}

void UcxCommunicator::pollPeerErrors() {
  if (world_->poisoned) return;
  ucp_worker_progress(world_->worker);
  world_->throwNotice();
}

std::unique_ptr<SharedSegment> UcxCommunicator::allocateShared(size_t slotBytes) {
  return store_world::allocatePosixShared(
      *this, slotBytes, fmt::format("/bigbatch-ucx-{}-{}-{}", getpid(), space_, ++segments_));
}

}  // namespace bigbatch
