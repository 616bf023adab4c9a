// Internal helpers shared by the power-of-two algorithms: the fold/unfold of
// non-power-of-two worlds, and recursive doubling over raw bytes with an
// arbitrary combine function. Called by one thread per rank.
#pragma once

#include <cstring>
#include <functional>
#include <memory>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

inline constexpr int kSignatureTag = 0x7f00;
inline constexpr int kFoldTag = 0x7f01;
inline constexpr int kDoublingTag = 0x7f02;
inline constexpr int kHalvingTag = 0x7f03;
inline constexpr int kRingTag = 0x7f04;
inline constexpr int kBroadcastTag = 0x7f05;
inline constexpr int kGatherTag = 0x7f06;
// The pipelined hierarchical allreduce's rings in flight: kPipelineTag + (piece % 4).
inline constexpr int kPipelineTag = 0x7f08;

// The rank's place in the power-of-two sub-world after folding.
struct Fold {
  int p = 1;          // largest power of two <= n
  int rem = 0;        // n - p
  int newRank = -1;   // -1: this rank sits out (even rank < 2·rem)
  // The real rank of virtual rank v.
  int realRank(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
};

inline Fold makeFold(int rank, int n) {
  Fold f;
  while (f.p * 2 <= n) f.p *= 2;
  f.rem = n - f.p;
  if (rank < 2 * f.rem) {
    f.newRank = rank % 2 == 1 ? rank / 2 : -1;
  } else {
    f.newRank = rank - f.rem;
  }
  return f;
}

using Combine = std::function<void(void* dst, const void* src)>;

// A receive buffer left uninitialised: every byte is written by a receive
// before it is read. (A std::vector zeroed it first: at 64 MiB that memset
// was a tenth of a halving-doubling allreduce's time on the emulated 10 Gb/s
// link, docs/BENCHMARKS.md "Without MPI".)
inline std::unique_ptr<uint8_t[]> receiveBuffer(size_t bytes) {
  return std::unique_ptr<uint8_t[]>(new uint8_t[bytes]);
}

// Fold in: even ranks below 2·rem hand their buffer to rank+1, which combines
// (`tmp`: `bytes` of scratch, on that rank).
inline void foldIn(Communicator& comm, const Fold& f, void* data, size_t bytes, uint8_t* tmp,
                   const Combine& combine) {
  const int rank = comm.rank();
  if (rank >= 2 * f.rem) return;
  if (f.newRank < 0) {
    comm.send(data, bytes, rank + 1, kFoldTag);
  } else {
    comm.recv(tmp, bytes, rank - 1, kFoldTag);
    combine(data, tmp);
  }
}

// Fold out: the odd partner returns the result to the even rank that sat out.
inline void foldOut(Communicator& comm, const Fold& f, void* data, size_t bytes) {
  const int rank = comm.rank();
  if (rank >= 2 * f.rem) return;
  if (f.newRank < 0) {
    comm.recv(data, bytes, rank + 1, kFoldTag);
  } else {
    comm.send(data, bytes, rank - 1, kFoldTag);
  }
}

inline void recursiveDoubling(Communicator& comm, void* data, size_t bytes, int tag,
                              const Combine& combine) {
  const int n = comm.size();
  if (n == 1 || bytes == 0) return;
  const Fold f = makeFold(comm.rank(), n);
  const std::unique_ptr<uint8_t[]> tmp = receiveBuffer(bytes);
  foldIn(comm, f, data, bytes, tmp.get(), combine);
  if (f.newRank >= 0) {
    for (int mask = 1; mask < f.p; mask <<= 1) {
      const int peer = f.realRank(f.newRank ^ mask);
      comm.sendrecv(data, bytes, peer, tmp.get(), bytes, peer, tag);
      combine(data, tmp.get());
    }
  }
  foldOut(comm, f, data, bytes);
}

}  // namespace bigbatch
