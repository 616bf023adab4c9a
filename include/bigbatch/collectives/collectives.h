// The collectives besides allreduce, over any Communicator: broadcast,
// allgather and reduce-scatter. Like Allreduce::run they first check that
// every rank passed the same arguments (MismatchError on every rank if not)
// and honour the communicator's deadline.
//
// Chunks: allgather and reduce-scatter cut `count` elements into n chunks,
// chunk c = [count·c/n, count·(c+1)/n) (sizes differ by at most one), the
// same partition the ring allreduce uses; rank c owns chunk c.
//
// Threading: one thread per rank, like every collective.
#pragma once

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

// Copies `bytes` at `data` from `root` to every rank. Binomial tree:
// ceil(log2 n) steps; the root sends S bytes per child it has.
void broadcast(Communicator& comm, void* data, size_t bytes, int root);

// In place: on entry rank c's chunk c of `data` is valid; on return every
// chunk is valid on every rank. Ring: n-1 steps, S·(n-1)/n bytes sent per rank.
// `checkSignature` = false skips the argument check (one small collective),
// for callers that verified their arguments once and then repeat them.
void allgather(Communicator& comm, void* data, size_t count, DataType type,
               bool checkSignature = true);

// In place: on return rank c's chunk c holds the sum over ranks of chunk c
// (the other chunks hold partial sums). Ring: n-1 steps, S·(n-1)/n bytes
// sent per rank; 16-bit types accumulate in fp32 per hop.
void reduceScatter(Communicator& comm, void* data, size_t count, DataType type,
                   bool checkSignature = true);

// First element of chunk c when `count` elements are cut into n chunks.
size_t chunkBegin(size_t count, int n, int c);

}  // namespace bigbatch
