// The state every UcxCommunicator of one world shares (UCP's context,
// worker and endpoints, each peer's state), and the world's control
// messages in tag space 0: error notices (postError), and the goodbye a
// rank sends when it closes normally — how a peer still waiting on it tells
// a normal end (PeerEndedError) from a failure. Private to src/comm: the
// tag layout and the helpers ucx_communicator.cpp builds its requests on.
//
// Threading contract: UcxCommunicator's — one thread at a time for the
// whole world (the worker is UCS_THREAD_MODE_SERIALIZED).
#pragma once

#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include <ucp/api/ucp.h>

#include "bigbatch/comm/ucx_communicator.h"
#include "bigbatch/common/error.h"

namespace bigbatch {
namespace ucx {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint32_t kSpaces = 1u << 20;
constexpr uint32_t kWorldSpace = 1;
constexpr int kErrorTag = 0xffff;
// A rank that closes its world normally says so first (space 0, where no
// communicator's messages go), so that a peer still waiting on it can tell
// a normal end from a failure.
constexpr int kGoodbyeTag = 0xfffe;
constexpr size_t kErrorBytes = 4096;
constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};
// Space and tag, any source: what an error notice is probed by.
constexpr ucp_tag_t kNoticeMask = (ucp_tag_t{kSpaces - 1} << 44) | 0xffffu;
constexpr milliseconds kNoticeGrace{2000};
constexpr milliseconds kPeerEndGrace{200};

// The sender's bits of a tag ([space 20][sender 28][tag 16]); a receive from
// any source matches with them masked out.
constexpr ucp_tag_t kSenderBits = ucp_tag_t{0xfffffffu} << 16;

inline ucp_tag_t tagOf(uint32_t space, int worldRank, int tag) {
  return (ucp_tag_t{space} << 44) | (ucp_tag_t(uint32_t(worldRank) & 0xfffffffu) << 16) |
         ucp_tag_t(uint32_t(tag) & 0xffffu);
}
inline int sourceOf(ucp_tag_t tag) { return static_cast<int>((tag >> 16) & 0xfffffffu); }

inline void checkUcs(ucs_status_t status, const char* call) {
  BIGBATCH_REQUIRE(status == UCS_OK, IoError, "{} failed: {}", call, ucs_status_string(status));
}

inline ucp_request_param_t contiguousBytes() {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_DATATYPE;
  p.datatype = ucp_dt_make_contig(1);
  return p;
}


// Progresses the worker until request is no longer in progress (true) or
// `until` has passed (false).
bool progressUntil(ucp_worker_h worker, void* request, Clock::time_point until);

// UCP's error handler of every endpoint: records the peer's status.
void onPeerError(void* arg, ucp_ep_h ep, ucs_status_t status);

}  // namespace ucx

struct UcxCommunicator::World {
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  std::vector<ucp_ep_h> endpoints;  // by world rank; none to this rank
  std::vector<std::string> hosts;   // by world rank
  std::vector<ucs_status_t> peerStatus;  // by world rank: set by the error handler
  int rank = 0;
  bool broken = false;
  // A request UCX could neither finish nor cancel may still touch a buffer
  // its owner freed: the worker is then never progressed again.
  bool poisoned = false;
  std::deque<std::string> notices;
  std::vector<void*> noticeRequests;


  // Posted notices leave, a normal end says goodbye, the endpoints close,
  // what nobody took is drained; then the worker and context go (unless
  // poisoned: they are left to the process's end).
  ~World();

  // Whether worldPeer closed its world normally (its goodbye has arrived).
  bool saidGoodbye(int worldPeer, int rounds = 8);
  // Raises why the connection to worldPeer failed (`when` completes
  // "... failed <when>"): a notice first, then a normal end
  // (PeerEndedError), else the transport's status (PeerError).
  [[noreturn]] void throwPeerFailure(int worldPeer, int peer, const std::string& when,
                                     ucs_status_t status);
  // Raises the first error notice waiting for this rank, if any.
  void throwNotice();

 private:
  void sayGoodbye();
  void drainSpaceZero();
};

}  // namespace bigbatch
