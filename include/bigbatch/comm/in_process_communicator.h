// InProcessCommunicator: N threads of one process act as N ranks, exchanging
// messages through shared mailboxes. Sends are eager (copied into the
// receiver's mailbox, complete at once); receives match by (source, tag) in
// FIFO order. For unit tests of collectives: fast, deterministic, no MPI.
//
// Thread-safe across ranks (one mutex and condition variable per group);
// each rank's Communicator is used by its own thread.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

class InProcessGroup;

// Runs fn(rank's communicator) on `size` threads and waits for all of them.
// `ranksPerHost` (0: all on one host) simulates several hosts for
// hierarchical algorithms. If any rank throws, the first exception (by rank)
// is rethrown after all threads end; a throwing rank posts an error so the
// others stop waiting.
void runInProcess(int size, const std::function<void(Communicator&)>& fn, int ranksPerHost = 0,
                  int64_t timeoutMs = 20000);

// Creates the communicators of one in-process group, one per rank.
std::vector<std::unique_ptr<Communicator>> makeInProcessGroup(int size, int ranksPerHost = 0);

}  // namespace bigbatch
