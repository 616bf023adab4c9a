// The allreduce algorithms (see allreduce.h for the contract). Notation:
// n ranks, S bytes per rank, p = the largest power of two <= n, r = n - p.
// For non-powers of two the "fold" step pairs ranks 2i and 2i+1 for i < r:
// the even one sends its S bytes to the odd one and sits out, then receives
// the result at the end ("unfold"): +2 steps and +S bytes for those ranks.
#pragma once

#include "bigbatch/collectives/allreduce.h"

namespace bigbatch {

// Ring (Patarasuk & Yuan 2009): reduce-scatter then allgather around the ring.
// n chunks of S/n bytes; in reduce-scatter step s rank i sends chunk (i-s) to
// its right neighbour and adds chunk (i-s-1) received from its left; after
// n-1 steps it owns the sum of chunk (i+1); allgather circulates the sums for
// n-1 more steps. Each transfer is cut into segments of `segmentBytes` (0: the
// transport's, Communicator::segmentBytes()), and
// the receive of the next segment is posted before the current one is summed.
// Steps 2(n-1); bytes sent per rank 2·S·(n-1)/n (bandwidth-optimal).
class RingAllreduce : public Allreduce {
 public:
  using Allreduce::Allreduce;
  const char* name() const override { return "ring"; }

 protected:
  void reduce(Communicator& comm, void* data, size_t count, DataType type) override;
};

// Recursive halving-doubling (Rabenseifner 2004): after the fold, log2(p)
// rounds of recursive halving (exchange half of the current block with the
// partner at distance p/2, p/4, ..., 1 and add) leave each rank with 1/p of
// the sum; log2(p) rounds of recursive doubling gather it back.
// Steps 2·log2(p) (+2 with fold); bytes sent per rank 2·S·(p-1)/p.
class HalvingDoublingAllreduce : public Allreduce {
 public:
  using Allreduce::Allreduce;
  const char* name() const override { return "halving_doubling"; }

 protected:
  void reduce(Communicator& comm, void* data, size_t count, DataType type) override;
};

// Recursive doubling: after the fold, log2(p) rounds exchanging the whole
// buffer with the partner at distance 1, 2, 4, ... and adding.
// Steps log2(p) (+2 with fold); bytes sent per rank S·log2(p). Fewest steps:
// the choice for small messages, where latency dominates.
class RecursiveDoublingAllreduce : public Allreduce {
 public:
  using Allreduce::Allreduce;
  const char* name() const override { return "recursive_doubling"; }

 protected:
  void reduce(Communicator& comm, void* data, size_t count, DataType type) override;
};

// Shared memory inside one host (MPI-3 shared window, or one heap block
// in-process): each rank owns a slot with two staging buffers of C bytes
// (options.shmChunkBytes, rounded down to whole 512-byte units, at least
// one: the same bytes for every element type). Per chunk of C bytes: (1)
// every rank copies its chunk into its staging buffer; step counter; (2)
// rank r sums slice r of the chunk straight from all n staging buffers (in
// rank order, fp32 accumulation for 16-bit types) into its own buffer and
// staging slot; step counter; (3) every rank copies the other n-1 reduced
// slices out. Double buffering lets chunk k+1 stage while peers still copy
// chunk k out.
// Steps: 2 counter waits per chunk, no messages. Memory traffic per rank:
// ~S in, S/n·(n+2) for the reduce, S·(n-1)/n out; C is sized to stay in L2,
// so only the user's buffer itself streams through DRAM.
// Requires every rank on one host (use "hierarchical" across hosts).
class SharedMemoryAllreduce : public Allreduce {
 public:
  using Allreduce::Allreduce;
  const char* name() const override { return "shm"; }
  static size_t chunkElements(size_t chunkBytes, DataType type);

 protected:
  void reduce(Communicator& comm, void* data, size_t count, DataType type) override;
};

// Hierarchical (two levels, as in the 2048-GPU ImageNet runs): (1) inside
// each host through shared memory, a reduce-scatter of the L local blocks
// with equal ranks per host (each local rank then holds its block's sum),
// else an allreduce (on one host, that allreduce is all); (2) with equal
// ranks per host, local rank l allreduces block l (S/L bytes) with its
// same-local-rank peers on the other hosts, so every rank's link works at
// once; otherwise local rank 0 allreduces the whole buffer among the
// hosts' leaders; (3) inside each host, an allgather of the L blocks
// through shared memory (or a broadcast from the leader).
// The shared-memory phases: src/collectives/shared_memory_blocks.h. The
// inter-host step uses ring for blocks of at least options.segmentBytes
// (256 KiB where 0, on every transport) and recursive doubling below.
// Pipelined with equal ranks per host, where the buffer holds at least two
// pieces of options.pipelineBytes and the transport can poll its requests
// (MPI, UCX; not Gloo's): the phases run piece by piece, each piece's
// inter-host ring (src/collectives/ring_in_flight.h) moving while the next
// piece is reduce-scattered and the one before it allgathered, so the link
// is not idle while the memory phases run (docs/BENCHMARKS.md, "Horovod as
// the peer": up to 8 % less time a call at 8-64 MiB on 2 x 2 emulated hosts
// at 1 Gb/s). Pieces: options.pipelineBytes (allreduce.h). Each piece's
// inter-host step is a ring, whatever its size; with 3 or more hosts the
// ring's chunks follow the pieces, so pipelined and one-piece results may
// differ in the last bit (every rank still ends with the same bits).
// Bytes across hosts per rank: 2·(S/L)·(h-1)/h for h hosts; the intra-host
// phases move only memory.
class HierarchicalAllreduce : public Allreduce {
 public:
  using Allreduce::Allreduce;
  const char* name() const override { return "hierarchical"; }

 protected:
  void reduce(Communicator& comm, void* data, size_t count, DataType type) override;
  // Pipelined, each piece filled before its first phase and drained after
  // its last (AllreduceStages); where it runs in one piece (one host,
  // unequal hosts, Gloo's transport), fill all, sum, drain all.
  void reduceStaged(Communicator& comm, void* data, size_t count, DataType type,
                    AllreduceStages& stages) override;

 private:
  void reduceIn(Communicator& comm, void* data, size_t count, DataType type,
                AllreduceStages* stages);
  void onePiece(Communicator& host, Communicator& cross, void* data, size_t count, DataType type,
                bool uniform, bool oneHost);
};

// MPI's own MPI_Allreduce (the reference every algorithm is measured
// against); 16-bit types use a user-defined MPI_Op that sums in fp32.
// Requires an MpiCommunicator. MPI_Allreduce has no deadline of its own.
class MpiAllreduce : public Allreduce {
 public:
  using Allreduce::Allreduce;
  const char* name() const override { return "mpi"; }

 protected:
  void reduce(Communicator& comm, void* data, size_t count, DataType type) override;
};

}  // namespace bigbatch
