// Allreduce: in-place elementwise sum of a buffer across every rank of a
// Communicator. Each algorithm is a small class behind this interface; its
// header comment gives its steps and bytes on the wire (n ranks, S bytes).
// Low-precision types (bfloat16, float16) are summed in fp32 and rounded once
// per hop. Any count (0, 1, primes) and any world size are supported.
//
// Threading: run() is called by one thread per rank (the communication
// thread in training); an algorithm object holds no per-call state.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

struct AllreduceOptions {
  size_t segmentBytes = 0;             // pipelining unit of the ring (bytes); 0: the
                                       // transport's (Communicator::segmentBytes())
  size_t shmChunkBytes = 512 * 1024;   // staging chunk per rank of the shared-memory path (bytes)
  // "hierarchical" across hosts of equal ranks: the buffer in pieces of
  // this many bytes or up to twice that (floor(bytes / pipelineBytes)
  // pieces, at most 1024 and at most one an element), each piece's
  // inter-host ring in flight while the next is staged and the last brought
  // home. kPipelineAuto: segmentBytes x all ranks, so that a ring message is
  // one to two of the transport's segments; 0: one piece.
  static constexpr size_t kPipelineAuto = ~size_t{0};
  size_t pipelineBytes = kPipelineAuto;
  bool checkSignature = true;          // verify all ranks passed the same count and type
  // "auto" only: time the table's choice against the ring on this many calls
  // each (after one untimed call each), per power-of-two size class, then
  // keep the faster (0: the static table).
  int tuneTrials = 5;
  // "auto" only: MPI_Allreduce among the tuning's candidates on an MPI
  // transport. It has no deadline (a stopped peer holds it until a stall
  // watchdog ends the process); off where every collective must raise a
  // TimeoutError instead (the torch.distributed backend).
  bool tuneWithMpi = true;
};

// What a caller does to the buffer around the sum, piece by piece: fill()
// writes this rank's values into elements [begin, end) just before the
// algorithm first reads them, drain() reads the sum out of [begin, end) once
// it is final. A codec packs and unpacks there (src/ddp/half_codec.cpp), so
// that where the algorithm runs in pieces (the pipelined hierarchical
// allreduce) its packing runs while the link is busy with earlier pieces,
// not before the first byte moves. Every other algorithm fills all of the
// buffer, sums, then drains all of it. Each element is filled once and
// drained once, in ascending pieces; on an error some pieces may be drained
// and later ones never filled. With "auto", a staged call's tuning times the
// fill and drain too (serial for the ring, hidden by the pipeline), in the
// same size class as unstaged calls: a job sends a size class through a
// codec or not, seldom both.
//
// Threading: called on the thread that runs the allreduce, inside run(),
// while other pieces of the same buffer are on the wire: fill() and drain()
// touch only [begin, end) of the buffer and memory of their own, never the
// communicator. They must not throw: the peers would learn of it only at
// their deadline.
class AllreduceStages {
 public:
  virtual ~AllreduceStages() = default;
  virtual void fill(size_t begin, size_t end) = 0;
  virtual void drain(size_t begin, size_t end) = 0;
};

class Allreduce {
 public:
  explicit Allreduce(AllreduceOptions options) : options_(options) {}
  virtual ~Allreduce() = default;
  virtual const char* name() const = 0;

  // Sums `count` elements of `type` at `data` over all ranks, in place.
  // Ranks that pass different counts or types get MismatchError on every rank.
  void run(Communicator& comm, void* data, size_t count, DataType type);
  // The same sum, the buffer filled and drained through `stages`.
  void run(Communicator& comm, void* data, size_t count, DataType type, AllreduceStages& stages);

 protected:
  virtual void reduce(Communicator& comm, void* data, size_t count, DataType type) = 0;
  // An algorithm that runs in pieces fills and drains each in turn; this
  // one fills all, reduce()s, drains all.
  virtual void reduceStaged(Communicator& comm, void* data, size_t count, DataType type,
                            AllreduceStages& stages);
  AllreduceOptions options_;

 private:
  void runWith(Communicator& comm, void* data, size_t count, DataType type,
               AllreduceStages* stages);
};

// Names: "auto" (the size/topology table of allreduce_selector.h, default
// table), "ring", "halving_doubling", "recursive_doubling", "shm",
// "hierarchical", "mpi". allreduceNames() lists all but "auto".
std::unique_ptr<Allreduce> makeAllreduce(const std::string& name,
                                         AllreduceOptions options = AllreduceOptions{});
std::vector<std::string> allreduceNames();

// dst[i] += src[i] for `count` elements (fp32 accumulation for 16-bit types).
void sumInto(DataType type, void* dst, const void* src, size_t count);

// dst = srcs[0] + ... + srcs[n-1], summed in that order (fp32 accumulation
// for 16-bit types, rounded once). dst must not overlap any source.
void sumMany(DataType type, void* dst, const void* const* srcs, int n, size_t count);

// out[i] = type(in[i] · scale) for a 16-bit (or fp32) `type`, and back:
// out[i] = float(in[i]) · scale. Plain loops (the communication thread must
// not enter libtorch's OpenMP pool). Round to nearest even, as ATen.
void packFloats(DataType type, void* out, const float* in, size_t count, float scale);
void unpackFloats(DataType type, float* out, const void* in, size_t count, float scale);

// Every rank learns the element-wise maximum of `values` (recursive doubling).
void allreduceMaxInt64(Communicator& comm, int64_t* values, size_t count, int tag);

// Throws MismatchError on every rank unless all ranks passed the same
// (operation, count, type). One recursive-doubling exchange of 48 bytes.
void checkSameSignature(Communicator& comm, int64_t operation, size_t count, DataType type);

}  // namespace bigbatch
