// Reduce-scatter among the ranks of one host through the shared-memory
// staging segment of SharedMemoryAllreduce: the in-host phase (1) of the
// hierarchical allreduce with equal ranks per host, where each local rank
// sends only its own block across hosts and so needs the sum of that block
// alone. Against a full shared-memory allreduce it skips the copy-out of the
// peers' sums: about half the memory traffic per rank.
//
// Blocks are those of reduceScatter() (collectives.h): on return rank r's
// block [chunkBegin(count, n, r), chunkBegin(count, n, r + 1)) holds the sum
// over ranks (summed in rank order, 16-bit types in fp32 and rounded once,
// as SharedMemoryAllreduce does: the same bits); the other blocks are left
// as they were. Per staging chunk of C bytes, cut into n pieces of C/n:
// every rank copies the next piece of each peer's block into that peer's
// piece of its staging buffer, arrives, waits for all, sums its own
// block's piece from its buffer and the peers' staged pieces, and arrives
// again. The two arrivals per chunk and the double buffer chosen by
// (step / 2) % 2 are SharedMemoryAllreduce's, on the same segment and
// counters (shared_memory_allgather.h says why that is safe).
//
// No argument check (the caller's Allreduce::run made it); waits honour the
// communicator's deadline and name the late rank (shm_sync.h).
//
// Threading: one thread per rank, like every collective.
#pragma once

#include <cstddef>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

void sharedMemoryReduceScatter(Communicator& comm, void* data, size_t count, DataType type,
                               size_t chunkBytes);

}  // namespace bigbatch
