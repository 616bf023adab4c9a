// Communicator: the point-to-point and group operations every collective
// algorithm is built from, independent of the transport.
//
// Two implementations: MpiCommunicator (OpenMPI, one process per rank) and
// InProcessCommunicator (N threads of one process are N ranks; for fast,
// deterministic unit tests). Threading contract: one Communicator object is
// used by one thread at a time (the caller serialises; in training that is
// the communication thread). Every blocking wait honours timeoutMs(): a peer
// that does not answer in time raises TimeoutError naming that peer, and an
// error notice posted by a peer (see postError) raises MismatchError on
// every rank that is waiting, instead of a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace bigbatch {

enum class DataType : uint8_t {
  kFloat32 = 0,
  kBFloat16 = 1,
  kFloat16 = 2,
  kInt64 = 3,
  kUInt8 = 4,
  kFloat64 = 5,
};

size_t elementSize(DataType type);
const char* dataTypeName(DataType type);

// A pending non-blocking send or receive.
class Request {
 public:
  virtual ~Request() = default;
  // Blocks until complete, the deadline passes (TimeoutError) or a peer posts
  // an error (MismatchError).
  virtual void wait() = 0;
  // Never blocks: true once complete (wait() then returns at once); throws
  // what wait() would for a failure already seen (a peer's error notice, a
  // lost connection, a size that differs). No deadline: the caller keeps
  // its own. For a thread that keeps many operations in flight (the
  // torch.distributed backend's send and recv).
  virtual bool test() = 0;
  // The rank a receive from any source matched (Communicator::irecvAny),
  // once complete; for other requests their peer.
  virtual int source() const { return -1; }
};

// Memory that every rank of a single-host communicator can read and write
// directly: one slot of slotBytes() per rank, allocated collectively (MPI-3
// shared window or, in-process, one heap block). Slots start zeroed.
class SharedSegment {
 public:
  virtual ~SharedSegment() = default;
  virtual uint8_t* slot(int rank) = 0;
  virtual size_t slotBytes() const = 0;
};

class Communicator {
 public:
  Communicator();
  virtual ~Communicator() = default;

  // Unique within the process, never reused (unlike the object's address):
  // a key for per-communicator state such as tuning results.
  uint64_t id() const { return id_; }

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Ranks on this host, and this rank's index among them.
  virtual int localRank() const = 0;
  virtual int localSize() const = 0;
  // A short label for messages: "MPI" or "in-process".
  virtual std::string transportName() const = 0;

  virtual std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, int tag) = 0;
  // The matching send must carry exactly `bytes`; a different size raises
  // MismatchError naming both sizes and the peer.
  virtual std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, int tag) = 0;

  // A receive that matches a message of `tag` from any rank (MPI_ANY_SOURCE);
  // Request::source() names the sender once it completes. InvalidArgument
  // where the transport has none (Gloo's).
  virtual std::unique_ptr<Request> irecvAny(void* data, size_t bytes, int tag);
  // Whether Request::test() works on this transport (Gloo's: no — its
  // waits cannot be polled without ending the connection).
  virtual bool pollsRequests() const { return true; }
  // The ring's pipelining segment on this transport (bytes), where the
  // caller names none (AllreduceOptions::segmentBytes 0): small enough that
  // summing one segment overlaps receiving the next, large enough that each
  // message's own cost is paid rarely. Transports whose messages cost more
  // override it (UCX's).
  static constexpr size_t kDefaultSegmentBytes = 256 * 1024;
  virtual size_t segmentBytes() const { return kDefaultSegmentBytes; }
  void send(const void* data, size_t bytes, int peer, int tag);
  void recv(void* data, size_t bytes, int peer, int tag);
  // Sends to `dst` and receives from `src` concurrently (no deadlock in rings).
  void sendrecv(const void* sendData, size_t sendBytes, int dst, void* recvData, size_t recvBytes,
                int src, int tag);

  // Dissemination barrier (Hensgen et al. 1988) over point-to-point:
  // ceil(log2 n) rounds of 1-byte messages, each wait under the deadline.
  virtual void barrier();

  // Ranks with equal `color` form a new communicator, ordered by (key, rank).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // The ranks on this host (for hierarchical algorithms).
  std::unique_ptr<Communicator> splitByHost();
  // Ranks with the same local rank, one per host.
  std::unique_ptr<Communicator> splitByLocalRank();

  // Cached sub-communicators, created collectively on first use: the ranks
  // of this host, and the ranks with this rank's local rank (one per host).
  Communicator& hostComm();
  Communicator& crossHostComm();
  // True when every host holds the same number of ranks (computed once).
  bool uniformHosts();

  // Collective over this communicator, whose ranks must all share one host
  // (localSize() == size()); InvalidArgument otherwise or when the transport
  // has no shared memory. Segments are cached by `key` and re-allocated only
  // when a larger slot is asked for.
  SharedSegment& sharedSegment(const std::string& key, size_t slotBytes);

  // Throws MismatchError when a peer has posted an error notice (see
  // postError); spin-waits on shared memory call it periodically.
  virtual void pollPeerErrors() {}

  // Tells every other rank that this one failed with `message`; their pending
  // and future waits raise MismatchError carrying it. Best effort, non-blocking.
  virtual void postError(const std::string& message) = 0;

  int64_t timeoutMs() const { return timeoutMs_; }
  // Also applies to the cached sub-communicators.
  void setTimeoutMs(int64_t ms);

 protected:
  // Colour of this rank's host, identical for ranks that share a host.
  virtual int hostColor() = 0;
  virtual std::unique_ptr<SharedSegment> allocateShared(size_t slotBytes);
  // Destroys the cached segments, in key order (the same on every rank: a
  // transport may free them collectively). For a destructor that must do it
  // before its transport handle goes.
  void releaseSharedSegments();
  int64_t timeoutMs_ = 60000;

 private:
  uint64_t id_;
  std::unique_ptr<Communicator> hostComm_, crossHostComm_;
  int uniformHosts_ = -1;
  std::map<std::string, std::unique_ptr<SharedSegment>> segments_;
};

}  // namespace bigbatch
