// Allgather among the ranks of one host through the shared-memory staging
// segment of SharedMemoryAllreduce: the in-host phase (3) of the
// hierarchical allreduce, which before went through the host communicator's
// sends and receives (on MPI, its shared-memory transport: about 4x the
// time of the copies themselves for 32 MiB on 2 ranks, docs/BENCHMARKS.md).
//
// Blocks are those of allgather() (collectives.h): rank r's block is
// [chunkBegin(count, n, r), chunkBegin(count, n, r + 1)). Per staging chunk
// of C bytes: every rank copies the next C bytes of its block into its
// staging buffer, arrives, waits for all, copies the peers' pieces out, and
// arrives again. The two arrivals per chunk and the double buffer chosen by
// (step / 2) % 2 are SharedMemoryAllreduce's, on the same segment and
// counters, so one call may follow another of either kind: a buffer is
// written again only after every peer has arrived past its reads of it.
//
// No argument check (the caller's Allreduce::run made it); waits honour the
// communicator's deadline and name the late rank (shm_sync.h).
//
// Threading: one thread per rank, like every collective.
#pragma once

#include <cstddef>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

void sharedMemoryAllgather(Communicator& comm, void* data, size_t count, DataType type,
                           size_t chunkBytes);

}  // namespace bigbatch
