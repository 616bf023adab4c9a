// One pass of n-1 ring steps over a buffer cut into n chunks (chunk c holds
// elements [count·c/n, count·(c+1)/n)). In step s rank i sends chunk
// (i - s + shift) to its right neighbour and receives chunk (i - s - 1 + shift)
// from its left, segment by segment, posting the next segment's receive
// before it sums the current one. With `reduce` the received chunk is added
// to the local one (a reduce-scatter: the last chunk rank i receives, which
// it then holds fully summed, is (i + shift + 1) mod n, so shift -1 leaves
// rank i with chunk i), otherwise it replaces it (an allgather: shift 0 makes
// rank i start by sending its own chunk i). Shared by the ring allreduce, reduce-scatter
// and allgather.
#pragma once

#include "bigbatch/collectives/allreduce.h"

namespace bigbatch {

// Chunk c of a ring over n ranks starts at element ringChunkBegin(count, n, c).
inline size_t ringChunkBegin(size_t count, int n, int c) {
  return count * static_cast<size_t>(c) / static_cast<size_t>(n);
}

void ringPass(Communicator& comm, void* data, size_t count, DataType type, size_t segmentBytes,
              bool reduce, int shift, int tag);

}  // namespace bigbatch
