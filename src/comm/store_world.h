// What the store-bootstrapped transports (GlooCommunicator, UcxCommunicator)
// share, so each holds only what its library does differently: meeting in
// the key-value store (every rank's world size checked, every rank's host
// name learnt), the host layout of a communicator from those names, the
// members of a split, the tag space a split's communicator gets, and
// shared memory for the ranks of one host (POSIX shm).
//
// Threading contract: as Communicator's; meet() may run on several threads
// at once against one store (each its own rank).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/comm/key_value_store.h"

namespace bigbatch::store_world {

uint64_t mix64(uint64_t x);  // splitmix64's finaliser
std::string thisHostName();

// Every rank publishes "<size> <host>" under `prefix`rank/<rank> and reads
// every other's: returns the host of each rank. A rank that reads another
// world size than its own refuses (InvalidArgument naming both values) and
// says so in the store, where every rank still waiting reads it and refuses
// too; ranks that had every key they expected may go on as the smaller
// world. A rank that never comes is named at the deadline (TimeoutError).
// Each rank polls the store for n keys: at thousands of ranks a gather by
// rank 0 would be the better shape (not done).
std::vector<std::string> meet(KeyValueStore& store, int rank, int size, const std::string& prefix,
                              const std::string& host, std::chrono::milliseconds timeout);

struct HostLayout {
  int rank = 0;       // this rank in the communicator
  int color = 0;      // the lowest communicator rank on this rank's host
  int localRank = 0;  // this rank among those of its host
  int localSize = 1;
};
// `members`: the world rank of each communicator rank; `me`: this world rank.
HostLayout hostLayout(const std::vector<std::string>& hostOfWorldRank,
                      const std::vector<int>& members, int me);

// Collective over `comm` (whose ranks are `members` in the world): the world
// ranks of this rank's new communicator, ordered by (key, rank).
std::vector<int> splitMembers(Communicator& comm, const std::vector<int>& members, int color,
                              int key);

// The tag space of the `splitNumber`-th split of a communicator in
// `parentSpace`, colour `color`: 2 .. spaces-2 (0 is the error notices', 1
// the world's, spaces-1 reserved). A hash: two live communicators that share
// ranks could draw the same space, with odds of about k²/spaces for k of them.
uint32_t childSpace(uint32_t parentSpace, uint64_t splitNumber, int color, uint32_t spaces);

// Collective over a single-host communicator: one slot per rank, zeroed,
// in a POSIX shared-memory object named `name` plus a random part, made by
// rank 0, opened by the others, and unlinked (by rank 0, only if it made
// it) once every rank has it or the allocation failed.
std::unique_ptr<SharedSegment> allocatePosixShared(Communicator& comm, size_t slotBytes,
                                                   const std::string& name);

}  // namespace bigbatch::store_world
