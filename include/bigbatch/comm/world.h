// The world communicator of a launched job, and the one place that picks its
// transport: MPI when an MPI launcher (mpirun, or srun with PMI/PMIx) started
// the process; UCX (or Gloo's TCP transport) bootstrapped by c10d's TCPStore
// when torchrun did (or anything else that sets RANK, WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT: a Kubernetes PyTorchJob, a hand-written launcher).
//
// Under torchrun the store is found as torch.distributed's env:// start
// finds it (torch/distributed/rendezvous.py, _create_c10d_store): with
// TORCHELASTIC_USE_AGENT_STORE=True the agent hosts it and every rank is a
// client, its keys under /worker/attempt_<TORCHELASTIC_RESTART_COUNT>;
// otherwise rank 0 hosts it at MASTER_ADDR:MASTER_PORT.
//
// Threading contract: call from the main thread, once per process.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/comm/key_value_store.h"

namespace bigbatch {

enum class Launcher { kNone, kMpi, kTorchrun };

// MPI's variables first: mpirun sets no RANK, and a torchrun job sets none of MPI's.
Launcher detectLauncher();
const char* launcherName(Launcher launcher);
// True for a process one of those launchers started.
inline bool launchedByLauncher() { return detectLauncher() != Launcher::kNone; }

// torchrun's variables, checked: a missing or malformed one is named.
struct TorchrunEnvironment {
  int rank = 0, worldSize = 1, localRank = 0, restartCount = 0;
  std::string masterAddr;
  int masterPort = 0;
  bool agentStore = false;  // TORCHELASTIC_USE_AGENT_STORE=True

  static TorchrunEnvironment fromEnvironment();
};

// The world of `size` ranks that meet through `store` (torchrun's, or the
// one torch.distributed hands a backend), on the transport BIGBATCH_TRANSPORT
// names: "ucx" (the default: it progresses in the calling thread, as MPI
// does) or "gloo" (Gloo's TCP transport, as PyTorch's gloo backend).
// `routeTo` (MASTER_ADDR) picks Gloo's interface; keys live under
// `keyPrefix`.
std::unique_ptr<Communicator> connectOverStore(KeyValueStore& store, int rank, int size,
                                               const std::string& routeTo,
                                               std::chrono::milliseconds timeout,
                                               const std::string& keyPrefix = "bigbatch/");
// The transport BIGBATCH_TRANSPORT names, checked ("ucx" when unset).
std::string storeTransport();

// Ends every rank of a failed job from this one: MPI_Abort where MPI runs;
// otherwise this process exits with `code` at once (no destructors, no
// waiting for peers), and its launcher — torchrun's agent — ends the others.
[[noreturn]] void endJob(int code);

// The world for this process's launcher; InvalidArgument when none started it.
// `timeout` bounds the rendezvous (the store, every rank's arrival).
std::unique_ptr<Communicator> connectWorld(std::chrono::milliseconds timeout);

}  // namespace bigbatch
