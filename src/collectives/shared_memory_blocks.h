// Reduce-scatter and allgather of per-rank blocks among the ranks of one
// host, through the shared-memory staging segment of SharedMemoryAllreduce:
// the hierarchical allreduce's in-host phases (1) and (3) where every host
// has the same number of ranks. Each local rank sends only its own block
// across the hosts, so it needs that block's sum alone before (a full
// allreduce would also copy out the peers' sums), and the peers' blocks
// after — through shared memory, not the host communicator's sends: that
// allgather made 16-64 MiB of fp16 on 2 x 2 emulated hosts at 1 Gb/s take
// 4-5 % more time a call (docs/BENCHMARKS.md, "Horovod as the peer").
//
// Blocks are those of reduceScatter() and allgather() (collectives.h):
// rank r's block is [chunkBegin(count, n, r), chunkBegin(count, n, r + 1)).
//
// Both walk the blocks one staging chunk of C bytes at a time, with the
// two arrivals per chunk and the double buffer chosen by (step / 2) % 2 of
// SharedMemoryAllreduce, on the same segment and counters — so a call of
// any of the three may follow another: a rank writes a buffer again only
// after every peer has arrived past its reads of it (the buffers lie at the
// same offsets for every element type: SharedMemoryAllreduce::chunkElements).
//  - reduce-scatter: the chunk is cut into n pieces of C/n; every rank
//    copies the next piece of each peer's block into that peer's piece of
//    its buffer, arrives, waits for all, sums its own block's piece from
//    its data and the peers' pieces (rank order, 16-bit types in fp32 and
//    rounded once, as SharedMemoryAllreduce: the same bits), and arrives
//    again. The other blocks are left as they were.
//  - allgather: every rank copies the next C bytes of its block into its
//    buffer, arrives, waits for all, copies the peers' pieces out, and
//    arrives again.
//
// No argument check (the caller's Allreduce::run made it); waits honour the
// communicator's deadline and name the late rank (shm_sync.h). `progress`,
// where given, is called once a chunk and on every unsuccessful poll of a
// wait: the pipelined hierarchical allreduce moves its inter-host rings on
// from there.
//
// Threading: one thread per rank, like every collective.
#pragma once

#include <cstddef>

#include "bigbatch/comm/communicator.h"
#include "shm_sync.h"

namespace bigbatch {

void sharedMemoryReduceScatter(Communicator& comm, void* data, size_t count, DataType type,
                               size_t chunkBytes, const ShmProgress& progress = {});

void sharedMemoryAllgather(Communicator& comm, void* data, size_t count, DataType type,
                           size_t chunkBytes, const ShmProgress& progress = {});

}  // namespace bigbatch
