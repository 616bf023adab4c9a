#include "ucx_world.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace ucx {

bool progressUntil(ucp_worker_h worker, void* request, Clock::time_point until) {
  while (ucp_request_check_status(request) == UCS_INPROGRESS && Clock::now() < until) {
    ucp_worker_progress(worker);
  }
  return ucp_request_check_status(request) != UCS_INPROGRESS;
}

void onPeerError(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* world = static_cast<UcxCommunicator::World*>(arg);
  // Recorded, not yet a failure: the peer may have ended normally (its
  // goodbye tells), which only an operation still waiting on it makes one.
  for (size_t r = 0; r < world->endpoints.size(); ++r) {
    if (world->endpoints[r] == ep && world->peerStatus[r] == UCS_OK) world->peerStatus[r] = status;
  }
}

}  // namespace ucx

using namespace ucx;

UcxCommunicator::World::~World() {
  // Notices this rank posted leave before the endpoints close (their
  // peers are always ready to take them): a bounded grace.
  const auto until = Clock::now() + kNoticeGrace;
  for (void* r : noticeRequests) {
    if (!poisoned) progressUntil(worker, r, until);
    ucp_request_free(r);
  }
  if (poisoned) return;  // the worker and context are left to the process's end
  // Only a normal end says goodbye: not a world that failed, posted an
  // error notice, or goes while an exception unwinds.
  if (!broken && notices.empty() && std::uncaught_exceptions() == 0) sayGoodbye();
  // Close every endpoint, flushing it unless the world or that peer
  // failed (then at once): the peers' sends to this rank end, not hang.
  std::vector<void*> closing;
  for (size_t r = 0; r < endpoints.size(); ++r) {
    if (endpoints[r] == nullptr) continue;
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = broken || peerStatus[r] != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    ucs_status_ptr_t s = ucp_ep_close_nbx(endpoints[r], &p);
    if (s != nullptr && !UCS_PTR_IS_ERR(s)) closing.push_back(s);
  }
  const auto closeUntil = Clock::now() + kNoticeGrace;
  for (void* r : closing) {
    progressUntil(worker, r, closeUntil);
    ucp_request_free(r);
  }
  if (worker != nullptr) drainSpaceZero();
  if (poisoned) return;
  if (worker != nullptr) ucp_worker_destroy(worker);
  if (context != nullptr) ucp_cleanup(context);
}

// Takes the goodbyes and notices nobody received (UCX warns of every
// message left unmatched when its worker goes).
void UcxCommunicator::World::drainSpaceZero() {
  constexpr ucp_tag_t kSpaceMask = ucp_tag_t{kSpaces - 1} << 44;
  ucp_tag_recv_info_t info{};
  while (ucp_tag_message_h msg = ucp_tag_probe_nb(worker, 0, kSpaceMask, /*remove=*/1, &info)) {
    auto bytes = std::make_unique<char[]>(std::max<size_t>(info.length, 1));
    ucp_request_param_t p = contiguousBytes();
    ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(worker, bytes.get(), info.length, msg, &p);
    if (r == nullptr || UCS_PTR_IS_ERR(r)) continue;
    const auto until = Clock::now() + milliseconds(100);
    if (!progressUntil(worker, r, until)) {  // the buffer stays UCX's
      bytes.release();
      poisoned = true;
      return;
    }
    ucp_request_free(r);
  }
}

// A zero-byte message to every peer still connected, after a flush (so
// everything sent before it has landed at the peer, on whichever lane);
// the flushing close that follows delivers it before the endpoint goes.
void UcxCommunicator::World::sayGoodbye() {
  std::vector<void*> flushing;
  for (size_t r = 0; r < endpoints.size(); ++r) {
    if (endpoints[r] == nullptr || peerStatus[r] != UCS_OK) continue;
    ucp_request_param_t p{};
    ucs_status_ptr_t f = ucp_ep_flush_nbx(endpoints[r], &p);
    if (f != nullptr && !UCS_PTR_IS_ERR(f)) flushing.push_back(f);
  }
  const auto until = Clock::now() + kNoticeGrace;
  for (void* f : flushing) {
    progressUntil(worker, f, until);
    ucp_request_free(f);
  }
  for (size_t r = 0; r < endpoints.size(); ++r) {
    if (endpoints[r] == nullptr || peerStatus[r] != UCS_OK) continue;
    ucp_request_param_t p = contiguousBytes();
    ucs_status_ptr_t s =
        ucp_tag_send_nbx(endpoints[r], nullptr, 0, tagOf(0, rank, kGoodbyeTag), &p);
    if (s != nullptr && !UCS_PTR_IS_ERR(s)) ucp_request_free(s);  // the close flushes it
  }
}

// Whether worldPeer closed its world normally (its goodbye has arrived).
// A few rounds of progress: the goodbye precedes the close on the wire,
// but the failure may be seen in the same progress call that reads it.
bool UcxCommunicator::World::saidGoodbye(int worldPeer, int rounds) {
  ucp_tag_recv_info_t info{};
  for (int round = 0; round < rounds; ++round) {
    ucp_worker_progress(worker);
    if (ucp_tag_probe_nb(worker, tagOf(0, worldPeer, kGoodbyeTag), kFullMask, /*remove=*/0,
                         &info) != nullptr) {
      return true;
    }
  }
  return false;
}

// Raises why the connection to worldPeer failed: a peer's notice first
// (a rank that said why it failed; the peer may have left because of it),
// then a normal end, else the transport's status.
// `when` completes "... failed <when>".
void UcxCommunicator::World::throwPeerFailure(int worldPeer, int peer, const std::string& when,
                                              ucs_status_t status) {
  throwNotice();
  if (saidGoodbye(worldPeer)) {
    BIGBATCH_THROW(PeerEndedError,
                   "rank {} ended its communicator normally {}: the ranks' sends and "
                   "receives (or collectives) do not match",
                   peer, when);
  }
  broken = true;
  BIGBATCH_THROW(PeerError, "the connection to rank {} failed {}: {}", peer, when,
                 ucs_status_string(status));
}

// Raises the first error notice waiting for this rank, if any.
void UcxCommunicator::World::throwNotice() {
  ucp_tag_recv_info_t info{};
  ucp_tag_message_h msg =
      ucp_tag_probe_nb(worker, tagOf(0, 0, kErrorTag), kNoticeMask, /*remove=*/1, &info);
  if (msg == nullptr) return;
  auto bytes = std::make_unique<char[]>(info.length + 1);  // zeroed: ends the text
  ucp_request_param_t p = contiguousBytes();
  ucs_status_ptr_t r = ucp_tag_msg_recv_nbx(worker, bytes.get(), info.length, msg, &p);
  std::string text;
  if (r == nullptr) {
    text = bytes.get();
  } else if (!UCS_PTR_IS_ERR(r)) {
    if (progressUntil(worker, r, Clock::now() + kNoticeGrace)) {
      text = bytes.get();
      ucp_request_free(r);
    } else {  // UCX may still write it: the buffer stays UCX's, the worker unused
      bytes.release();
      poisoned = true;
      text = "(its notice did not arrive whole)";
    }
  }
  broken = true;
  BIGBATCH_THROW(MismatchError, "rank {} failed: {}", sourceOf(info.sender_tag), text);
}
}  // namespace bigbatch
