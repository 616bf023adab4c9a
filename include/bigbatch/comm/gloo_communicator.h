// GlooCommunicator: a Communicator over Gloo's TCP transport — the library
// PyTorch's gloo backend runs on (Debian's libgloo) — bootstrapped by a
// key-value store instead of MPI, so that ranks started by torchrun (or any
// launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) need no MPI.
// bigbatch's allreduce algorithms, selector, tuning, deadlines and error
// notices run on it unchanged; only the bytes move through Gloo.
//
// How the Communicator contract maps onto Gloo:
//  - One Gloo context (a full mesh of TCP pairs) per world. split() makes no
//    new connections: a sub-communicator translates its ranks to the world's
//    and sends on slots of its own (a 24-bit space hashed from the parent's
//    space, the split's number and the colour).
//  - Message matching: the slot carries the tag and the byte count (below
//    8 MiB; a 23-bit hash of it above), so a receive does not match a send
//    of another size (Gloo would abort the process on a longer one and
//    silently accept a shorter one): a size disagreement surfaces as a
//    TimeoutError naming the peer, not as the MismatchError MPI's and UCX's
//    length checks give. Above 8 MiB two sizes may share a hash.
//  - Deadlines: a wait that passes timeoutMs() raises TimeoutError naming the
//    peer. The deadline is bigbatch's (a timer thread aborts the wait), not
//    Gloo's, whose timeout would close every pair of the context and with
//    them the error notice this rank then sends. The communicator is broken
//    afterwards, and a request abandoned unfinished closes its pair (Gloo
//    would otherwise leave that pair stalled behind it).
//  - Error notices (postError): fixed-size messages on a reserved slot; a
//    watcher thread holds a receive from any rank and, when a notice lands,
//    aborts the wait in progress, which then raises MismatchError. A peer
//    whose pair this rank closed (above) learns of the failure as that
//    closed connection (PeerError), the others by the notice.
//  - Across hosts each rank listens where its route to MASTER_ADDR leaves;
//    a loopback address there is refused on every rank, naming the fix.
//  - A peer that exits closes its connections: waits raise PeerError.
//  - Shared memory for the ranks of one host: a POSIX shared-memory object
//    made by the first rank, opened by the others, unlinked once all have it
//    (so a crash leaves nothing behind in /dev/shm).
//  - The host of a rank is its host name (as OpenMPI's node name is).
//
// Threading contract: one thread at a time for the whole world (the world
// and its splits' communicators keep one wait in progress, which a notice or
// the deadline aborts). The watcher and timer threads touch only the
// world's error and wait state, under its mutex.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/comm/key_value_store.h"

namespace bigbatch {

struct GlooOptions {
  // The address this rank listens on. Empty: the interface named by
  // BIGBATCH_SOCKET_IFNAME (or GLOO_SOCKET_IFNAME); else the local address
  // the kernel routes `routeTo` through; else the host name's address.
  std::string listenAddress;
  // The store's host (MASTER_ADDR): the interface that reaches it reaches
  // the other ranks too, on every cluster we know of.
  std::string routeTo;
  // For the rendezvous and, until setTimeoutMs, every wait.
  std::chrono::milliseconds timeout{60000};
  // Prefix of this world's keys in the store.
  std::string keyPrefix = "bigbatch/";
  // The name that groups ranks into hosts; empty: gethostname(). (Tests
  // give threads of one process different names to stand for hosts.)
  std::string hostName;
};

class GlooCommunicator : public Communicator {
 public:
  // Collective over `size` ranks that share `store`. Checks first that every
  // rank was given the same size (InvalidArgument naming both otherwise),
  // then connects the full mesh. TimeoutError names the ranks that never
  // arrived.
  static std::unique_ptr<GlooCommunicator> connect(KeyValueStore& store, int rank, int size,
                                                   const GlooOptions& options);

  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  int localRank() const override { return localRank_; }
  int localSize() const override { return localSize_; }
  std::string transportName() const override { return "Gloo TCP"; }

  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, int tag) override;
  // Gloo's waits end a connection at their timeout: none can be polled.
  bool pollsRequests() const override { return false; }
  std::unique_ptr<Communicator> split(int color, int key) override;
  void postError(const std::string& message) override;
  void pollPeerErrors() override;

  // The address and port this rank listens on (for messages and tests).
  std::string listenDescription() const;
  bool broken() const;

  struct World;  // the Gloo context and what its communicators share

 protected:
  int hostColor() override { return hostColor_; }
  std::unique_ptr<SharedSegment> allocateShared(size_t slotBytes) override;

 private:
  GlooCommunicator(std::shared_ptr<World> world, std::vector<int> members, uint32_t space);
  uint64_t slotFor(int tag, size_t bytes) const;
  std::unique_ptr<Request> post(void* data, size_t bytes, int peer, int tag, bool isRecv);
  int worldRankOf(int peer) const;

  std::shared_ptr<World> world_;
  std::vector<int> members_;  // world rank of each rank of this communicator
  uint32_t space_;
  int rank_ = 0, localRank_ = 0, localSize_ = 1, hostColor_ = 0;
  uint64_t splits_ = 0;     // split() calls so far (collective: equal on every rank)
  uint64_t segments_ = 0;   // shared segments made so far (names them)
};

}  // namespace bigbatch
