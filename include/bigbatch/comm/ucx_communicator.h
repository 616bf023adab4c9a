// UcxCommunicator: a Communicator over UCX's tag-matching API (UCP; Debian's
// libucx: TCP between hosts, shared memory within one), bootstrapped by a
// key-value store like GlooCommunicator. The second store-bootstrapped
// transport, and the one torchrun starts use by default: UCX progresses
// in the calling thread, as MPI does, so a small message costs no thread
// hand-offs (Gloo's TCP transport moves bytes on a thread of its own, and
// each message waits for a wake-up: docs/BENCHMARKS.md, "Without MPI").
//
// How the Communicator contract maps onto UCP:
//  - One UCP context, worker and endpoint per peer for the world; a split's
//    communicator shares them and sends in a tag space of its own. The
//    64-bit tag is [space: 20 bits][source world rank: 28][tag: 16], matched
//    in full, so a receive takes only its peer's message with its tag.
//  - Sizes: a longer message fails the receive (UCS_ERR_MESSAGE_TRUNCATED)
//    and a shorter one is seen by its length: MismatchError either way.
//  - Deadlines: waits poll ucp_worker_progress against timeoutMs(); past it
//    TimeoutError names the peer. A request abandoned unfinished is
//    cancelled, or its peer's endpoint closed by force, before its buffer
//    can go; one that even then does not end leaves the worker unused.
//  - Error notices (postError): a message in space 0 with a reserved tag;
//    waits probe for it (ucp_tag_probe_nb) every 64 unsuccessful polls and
//    raise MismatchError carrying it.
//  - A peer that ends normally: its world, closing unfailed (no error
//    notice posted, no exception unwinding), flushes each endpoint and
//    sends a goodbye (space 0, another reserved tag). A wait on that peer
//    that sees it still in progress 200 ms later (what the peer sent before
//    may still be landing) raises PeerEndedError, "rank N ended its
//    communicator normally …": the ranks' calls do not match. A receive
//    from any source is tied to no peer and waits for its deadline.
//  - A peer that exits otherwise: endpoints use UCP_ERR_HANDLING_MODE_PEER,
//    so its sends fail with UCX's status, and waits on its receives check
//    the endpoint's state: PeerError (after the same grace; an error notice
//    that arrived first is raised instead). Over TCP its reset is seen at
//    once; over shared memory only by UCX's keep-alive, so there the
//    deadline may come first (a rank that dies under torchrun is ended by
//    the agent anyway).
//  - Shared memory for the ranks of one host: POSIX shm (store_world).
//
// Threading contract: as Communicator's — one thread at a time for the
// whole world (the worker is UCS_THREAD_MODE_SERIALIZED): a split's
// communicator is used by the same thread as its parent, or serialised
// with it by the caller.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/comm/key_value_store.h"

namespace bigbatch {

struct UcxOptions {
  std::chrono::milliseconds timeout{60000};  // the rendezvous, and waits until setTimeoutMs
  std::string keyPrefix = "bigbatch/";        // this world's keys in the store
  std::string hostName;                       // groups ranks into hosts; empty: gethostname()
};

class UcxCommunicator : public Communicator {
 public:
  // Collective over `size` ranks sharing `store`: the world size checked on
  // every rank, worker addresses exchanged, every endpoint made, then a
  // barrier (its log2 n rounds wire up the first endpoints; UCX wires the
  // others at their first message). The first connect of a process calls
  // setTcpSegmentDefaults() first.
  static std::unique_ptr<UcxCommunicator> connect(KeyValueStore& store, int rank, int size,
                                                  const UcxOptions& options);

  // UCX's TCP segments as bigbatch runs them: UCX_TCP_TX_SEG_SIZE and
  // UCX_TCP_RX_SEG_SIZE set to 256k in this process's environment where
  // neither is set; either one set leaves both to the user and UCX
  // (docs/TORCH_BACKEND.md, "Launching"). Not safe beside another thread
  // that reads the environment: connect() calls it once per process, under
  // a std::once_flag that its other callers wait on.
  static void setTcpSegmentDefaults();

  ~UcxCommunicator() override;
  UcxCommunicator(const UcxCommunicator&) = delete;
  UcxCommunicator& operator=(const UcxCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int localRank() const override { return localRank_; }
  int localSize() const override { return localSize_; }
  std::string transportName() const override { return "UCX"; }
  // 1 MiB: on the emulated 10 Gb/s link a ring over UCX in 256 KiB segments
  // ran at 0.76-0.93 of the same ring over MPI from 8 MiB on (each segment a
  // message, received into UCX's own buffers, then copied), at 0.97-1.00 in
  // 1 MiB segments; 4 MiB lost pipelining at 1 MiB (single runs,
  // docs/BENCHMARKS.md, "Without MPI").
  size_t segmentBytes() const override { return 1 << 20; }

  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, int tag) override;
  // Matches the tag with the sender's bits masked out.
  std::unique_ptr<Request> irecvAny(void* data, size_t bytes, int tag) override;
  // This communicator's rank of world rank `world` (-1: not a member).
  int rankOfWorldRank(int world) const;
  std::unique_ptr<Communicator> split(int color, int key) override;
  void postError(const std::string& message) override;
  void pollPeerErrors() override;
  bool broken() const;

  struct World;  // the UCP context, worker and endpoints its communicators share

 protected:
  int hostColor() override { return hostColor_; }
  std::unique_ptr<SharedSegment> allocateShared(size_t slotBytes) override;

 private:
  UcxCommunicator(std::shared_ptr<World> world, std::vector<int> members, uint32_t space);
  int worldRankOf(int peer) const;

  std::shared_ptr<World> world_;
  std::vector<int> members_;  // world rank of each rank of this communicator
  uint32_t space_;
  int rank_ = 0, localRank_ = 0, localSize_ = 1, hostColor_ = 0;
  uint64_t splits_ = 0, segments_ = 0;
};

}  // namespace bigbatch
