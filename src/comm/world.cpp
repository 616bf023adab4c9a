#include "bigbatch/comm/world.h"

#include <cstdio>
#include <cstdlib>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "bigbatch/comm/c10d_store.h"
#include "bigbatch/comm/gloo_communicator.h"
#include "bigbatch/comm/mpi_communicator.h"
#include "bigbatch/comm/ucx_communicator.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/parse_number.h"

namespace bigbatch {
namespace {

bool isSet(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

std::string required(const char* name) {
  const char* v = std::getenv(name);
  BIGBATCH_REQUIRE(v != nullptr && *v != '\0', InvalidArgument,
                   "{} is not set: a torchrun-style start sets RANK, WORLD_SIZE, MASTER_ADDR and "
                   "MASTER_PORT for every rank",
                   name);
  return v;
}

int wholeNumber(const char* name, const std::string& text, int64_t low, int64_t high) {
  const std::optional<long long> v = parseWholeInteger(text);
  BIGBATCH_REQUIRE(v && *v >= low && *v <= high, InvalidArgument,
                   "{}='{}' is not a whole number in {} .. {}", name, text, low, high);
  return static_cast<int>(*v);
}

// The store keeps serving while the process lives: ranks may still read
// keys after rank 0 (its host, when the agent does not host it) is through.
c10::intrusive_ptr<c10d::Store>& keptStore() {
  static auto* store = new c10::intrusive_ptr<c10d::Store>();
  return *store;
}

c10::intrusive_ptr<c10d::Store> openStore(const TorchrunEnvironment& env,
                                          std::chrono::milliseconds timeout) {
  const bool host = !env.agentStore && env.rank == 0;
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(env.masterPort);
  options.isServer = host;
  options.waitWorkers = false;
  options.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(env.masterAddr, options);
  } catch (const std::exception& e) {
    const std::string why = std::string(e.what()).substr(0, std::string(e.what()).find('\n'));
    if (host) {
      BIGBATCH_THROW(IoError,
                     "rank 0 cannot open the rendezvous store on port {} (MASTER_PORT): {}; "
                     "another job may be using that port: give this one another MASTER_PORT",
                     env.masterPort, why);
    }
    BIGBATCH_THROW(IoError,
                   "cannot reach the rendezvous store at {}:{} (MASTER_ADDR:MASTER_PORT) within "
                   "{} s: {}; check that rank 0 (or torchrun's agent) is running there and "
                   "that every rank was given the same MASTER_ADDR and MASTER_PORT",
                   env.masterAddr, env.masterPort, timeout.count() / 1000.0, why);
  }
}

}  // namespace

Launcher detectLauncher() {
  if (MpiCommunicator::launchedByMpi()) return Launcher::kMpi;
  if (isSet("RANK") && isSet("WORLD_SIZE") && isSet("MASTER_ADDR") && isSet("MASTER_PORT")) {
    return Launcher::kTorchrun;
  }
  return Launcher::kNone;
}

const char* launcherName(Launcher launcher) {
  switch (launcher) {
    case Launcher::kMpi: return "MPI";
    case Launcher::kTorchrun: return "torchrun";
    case Launcher::kNone: break;
  }
  return "none";
}

TorchrunEnvironment TorchrunEnvironment::fromEnvironment() {
  TorchrunEnvironment env;
  env.worldSize = wholeNumber("WORLD_SIZE", required("WORLD_SIZE"), 1, 1 << 24);
  env.rank = wholeNumber("RANK", required("RANK"), 0, env.worldSize - 1);
  env.masterAddr = required("MASTER_ADDR");
  env.masterPort = wholeNumber("MASTER_PORT", required("MASTER_PORT"), 1, 65535);
  if (isSet("LOCAL_RANK")) env.localRank = wholeNumber("LOCAL_RANK", std::getenv("LOCAL_RANK"), 0, 1 << 20);
  if (isSet("TORCHELASTIC_RESTART_COUNT")) {
    env.restartCount = wholeNumber("TORCHELASTIC_RESTART_COUNT",
                                   std::getenv("TORCHELASTIC_RESTART_COUNT"), 0, 1 << 20);
  }
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  env.agentStore = agent != nullptr && std::string(agent) == "True";
  return env;
}

void endJob(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialised = 0, finalized = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  if (initialised && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

std::string storeTransport() {
  const char* v = std::getenv("BIGBATCH_TRANSPORT");
  const std::string name = v != nullptr && *v != '\0' ? v : "ucx";
  BIGBATCH_REQUIRE(name == "ucx" || name == "gloo", InvalidArgument,
                   "BIGBATCH_TRANSPORT='{}' is not a transport: ucx (the default) or gloo", name);
  return name;
}

std::unique_ptr<Communicator> connectOverStore(KeyValueStore& store, int rank, int size,
                                               const std::string& routeTo,
                                               std::chrono::milliseconds timeout,
                                               const std::string& keyPrefix) {
  // A group made again in the same store (destroy_process_group, then
  // init_process_group: PyTorch hands the same prefix) must not read the
  // last one's keys: each rank counts its own arrivals, so the n-th world
  // meets under generation n on every rank, whatever each rank was told of
  // the world's size (a disagreement is then named, not a timeout).
  const int64_t arrivals = store.add(fmt::format("{}arrivals/{}", keyPrefix, rank), 1);
  const std::string prefix = fmt::format("{}{}/", keyPrefix, arrivals - 1);
  if (storeTransport() == "gloo") {
    GlooOptions options;
    options.routeTo = routeTo;
    options.timeout = timeout;
    options.keyPrefix = prefix;
    return GlooCommunicator::connect(store, rank, size, options);
  }
  UcxOptions options;
  options.timeout = timeout;
  options.keyPrefix = prefix;
  return UcxCommunicator::connect(store, rank, size, options);
}

std::unique_ptr<Communicator> connectWorld(std::chrono::milliseconds timeout) {
  switch (detectLauncher()) {
    case Launcher::kMpi:
      return MpiCommunicator::world();
    case Launcher::kTorchrun: {
      const TorchrunEnvironment env = TorchrunEnvironment::fromEnvironment();
      keptStore() = openStore(env, timeout);
      const std::string where = fmt::format("{}:{}", env.masterAddr, env.masterPort);
      std::unique_ptr<KeyValueStore> store = wrapC10dStore(keptStore(), where);
      // The agent's store outlives restarts: each attempt's keys apart, as
      // torch.distributed's own env:// start keeps them.
      const std::string prefix = env.agentStore
                                     ? fmt::format("/worker/attempt_{}/bigbatch/", env.restartCount)
                                     : "bigbatch/";
      return connectOverStore(*store, env.rank, env.worldSize, env.masterAddr, timeout, prefix);
    }
    case Launcher::kNone:
      break;
  }
  BIGBATCH_THROW(InvalidArgument,
                 "no launcher started this process: start it with mpirun or srun (MPI), or with "
                 "torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
}

}  // namespace bigbatch
