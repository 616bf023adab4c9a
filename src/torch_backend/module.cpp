// The Python module bigbatch_torch._C: the "bigbatch" backend's creator,
// which torch.distributed calls from init_process_group (registered by
// bigbatch_torch/__init__.py), and what bigbatch_torch.hooks needs of the
// process group (its codecs). Nothing else of bigbatch is exposed.
//
// Threading: called from Python with the GIL held; every call that waits
// for the communication thread releases it.
#include <pybind11/chrono.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>
#include <torch/extension.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "bigbatch/comm/c10d_store.h"
#include "bigbatch/comm/mpi_communicator.h"
#include "bigbatch/comm/world.h"
#include "bigbatch/common/error.h"
#include "process_group_bigbatch.h"

namespace py = pybind11;

namespace bigbatch::torch_backend {
namespace {

// Wait for every thread of the group without holding the GIL: a future's
// Python callback may be waiting for it on a completion thread.
// At interpreter exit (PyTorch 2.x's group registry may drop the last
// reference after Python is finalized) there is no GIL to release.
void releaseGilToJoin(const std::function<void()>& join) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    py::gil_scoped_release release;
    join();
  } else {
    join();
  }
}

std::chrono::milliseconds timeoutFor(std::chrono::milliseconds given) {
  if (const char* s = std::getenv("BIGBATCH_TIMEOUT_S"); s != nullptr && *s != '\0') {
    char* end = nullptr;
    const double seconds = std::strtod(s, &end);
    BIGBATCH_REQUIRE(*end == '\0' && seconds > 0, InvalidArgument,
                     "BIGBATCH_TIMEOUT_S='{}' is not a positive number of seconds", s);
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  return given;
}

// The process's rank in the job: RANK where set and a number, else
// `otherwise`.
int rankInJob(int otherwise) {
  const char* s = std::getenv("RANK");
  if (s == nullptr || *s == '\0') return otherwise;
  char* end = nullptr;
  const long r = std::strtol(s, &end, 10);
  return *end == '\0' && r >= 0 ? static_cast<int>(r) : otherwise;
}

// Under an MPI launch (mpirun, srun) every group is an MPI communicator of
// its own, made by its members alone (MpiCommunicator::group): the default
// group of every rank (`globalRanks` empty), or new_group's ranks, which
// c10d numbers as the default group does, and so MPI's world (the default
// group's check below holds them to it). Its own communicator, not
// MPI_COMM_WORLD, so that a group destroyed but still referenced (PyTorch
// 2.x keeps references, as does a script's global DDP model) never shares
// messages with the next. Each group's communication thread enters MPI at
// once, so MPI runs MPI_THREAD_MULTIPLE (initialised by this module's first
// group, or at import where the launch sets no OMPI_COMM_WORLD_* variables;
// a lower level, from the MPI or from a library that initialised MPI
// first, is named when a group would need more).
std::unique_ptr<Communicator> mpiGroup(std::vector<int> globalRanks, int rank, int size,
                                       bool first, std::chrono::milliseconds timeout) {
  MpiCommunicator::initialise(MpiCommunicator::Threads::kMultiple);
  int worldRank = 0, worldSize = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  if (globalRanks.empty()) {
    BIGBATCH_REQUIRE(size == worldSize && rank == worldRank, InvalidArgument,
                     "the process group is rank {} of {}, but MPI started this process as rank "
                     "{} of {}: start the script with mpirun -np N and let bigbatch_torch set "
                     "RANK and WORLD_SIZE (or set them to MPI's)",
                     rank, size, worldRank, worldSize);
    for (int r = 0; r < worldSize; ++r) globalRanks.push_back(r);
  }
  BIGBATCH_REQUIRE(static_cast<int>(globalRanks.size()) == size && rank >= 0 && rank < size &&
                       globalRanks[rank] == worldRank,
                   InvalidArgument,
                   "a bigbatch process group of {} rank(s) whose rank {} is this process, but "
                   "MPI started it as rank {}: under an MPI launch the default group's ranks "
                   "must be MPI's",
                   size, rank, worldRank);
  // The thread level MPI gave: bigbatch asked MPI_THREAD_MULTIPLE, but an
  // MPI without it, or another library that initialised MPI first, may give
  // less. One group calls MPI from its communication thread and the
  // caller's (SERIALIZED); groups side by side, at once (MULTIPLE).
  const int level = MpiCommunicator::threadLevel();
  const int needed = first ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE;
  const char* neededName = first ? "MPI_THREAD_SERIALIZED" : "MPI_THREAD_MULTIPLE";
  const char* what = first ? "a bigbatch process group" : "a second bigbatch process group "
                                                          "(new_group, a DeviceMesh)";
  BIGBATCH_REQUIRE(level >= needed || !MpiCommunicator::initialisedByBigbatch(), InvalidArgument,
                   "{} under an MPI launch needs {}, but this MPI provides only {}: use an MPI "
                   "built with thread support (Open MPI's default), or start the ranks with "
                   "torchrun",
                   what, neededName, MpiCommunicator::threadLevelName(level));
  BIGBATCH_REQUIRE(level >= needed, InvalidArgument,
                   "{} under an MPI launch needs {}, but MPI was initialised before the first "
                   "bigbatch group, by another library (mpi4py, or the script's own MPI_Init), "
                   "at {}: call init_process_group(\"bigbatch\") before that library "
                   "initialises MPI, or have it ask for MPI_THREAD_MULTIPLE (mpi4py's default)",
                   what, neededName, MpiCommunicator::threadLevelName(level));
  try {
    return MpiCommunicator::group(globalRanks, timeout.count());
  } catch (const std::exception& e) {
    // The members disagree or one is missing: a member that comes late may
    // pass its meeting on the others' messages and wait in
    // MPI_Comm_create_group for ever. The process's failure, so the job
    // ends (MPI_Abort) at exit even if the script catches this.
    ProcessGroupBigbatch::recordProcessFailure(e.what());
    throw;
  }
}

c10::intrusive_ptr<ProcessGroupBigbatch> createGroup(
    const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, std::vector<int> globalRanks) {
  // A group after the first (new_group, a DeviceMesh's dimensions) is a
  // world of its own: over MPI's launch an MPI communicator of its own
  // (mpiGroup), otherwise over the store c10d prefixed for it, with its own
  // UCX (or Gloo) connections; each with its own shared memory and
  // communication thread.
  const bool first = ProcessGroupBigbatch::aliveGroups() == 0;
  const bool overMpi = MpiCommunicator::launchedByMpi();
  // Errors name the process's rank in the job (RANK: torchrun's, or set
  // from MPI's by bigbatch_torch), not a subgroup's, whatever happens in
  // the connection below (the transports set it to the rank they are given).
  const int jobRank = rankInJob(first ? rank : errorRank());
  setErrorRank(jobRank);
  struct RestoreRank {
    int rank;
    ~RestoreRank() { setErrorRank(rank); }
  } restore{jobRank};
  // MPI under mpirun or srun; otherwise (torchrun, or any env:// start) UCX
  // or Gloo (BIGBATCH_TRANSPORT) over the store torch.distributed made
  // (comm/world.h).
  std::unique_ptr<Communicator> world;
  if (overMpi) {
    // The members' meeting may wait up to the timeout: without the GIL, so
    // other groups' future callbacks run meanwhile (it touches no Python).
    py::gil_scoped_release release;
    world = mpiGroup(std::move(globalRanks), rank, size, first, timeoutFor(timeout));
  } else {
    BIGBATCH_REQUIRE(store, InvalidArgument,
                     "the bigbatch backend was given no store and no MPI launch: start the ranks "
                     "with torchrun (init_method env://) or mpirun");
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    const std::string where = addr != nullptr && port != nullptr
                                  ? fmt::format("{}:{}", addr, port)
                                  : std::string("torch.distributed's store");
    const std::unique_ptr<KeyValueStore> kv = wrapC10dStore(store, where);
    world = connectOverStore(*kv, rank, size, addr != nullptr ? addr : "", timeoutFor(timeout));
  }
  BackendOptions options;
  options.timeout = timeoutFor(timeout);
  if (const char* name = std::getenv("BIGBATCH_ALLREDUCE"); name != nullptr && *name != '\0') {
    options.allreduce = name;
  }
  return c10::make_intrusive<ProcessGroupBigbatch>(std::move(world), rank, size, options);
}

// The group's class: what bigbatch_torch.hooks calls on it (its codecs).
void bindProcessGroup(py::module& m) {
  py::object base = py::module::import("torch._C._distributed_c10d").attr(kPythonBaseClass);
  py::class_<ProcessGroupBigbatch, c10::intrusive_ptr<ProcessGroupBigbatch>>(
      m, "ProcessGroupBigbatch", base)
      .def("describe", &ProcessGroupBigbatch::describe)
      .def(
          "_add_codec",
          [](ProcessGroupBigbatch& pg, const std::string& wire, bool powerSgd, int rank,
             int64_t startStep, bool errorFeedback, bool warmStart, double minCompressionRate) {
            CodecSpec spec;
            BIGBATCH_REQUIRE(wire == "fp32" || wire == "fp16" || wire == "bf16",
                             bigbatch::InvalidArgument,
                             "wire '{}': a bigbatch comm hook sends fp32, fp16 or bf16", wire);
            spec.wireType = wire == "fp16"   ? bigbatch::DataType::kFloat16
                            : wire == "bf16" ? bigbatch::DataType::kBFloat16
                                             : bigbatch::DataType::kFloat32;
            spec.powerSgd = powerSgd;
            spec.powerSgdOptions.rank = rank;
            spec.powerSgdOptions.startStep = startStep;
            spec.powerSgdOptions.errorFeedback = errorFeedback;
            spec.powerSgdOptions.warmStart = warmStart;
            spec.powerSgdOptions.minCompressionRate = minCompressionRate;
            return pg.codecs().add(spec);
          },
          py::arg("wire"), py::arg("powersgd"), py::arg("rank"), py::arg("start_step"),
          py::arg("error_feedback"), py::arg("warm_start"), py::arg("min_compression_rate"))
      .def(
          "_wire_codec",
          [](ProcessGroupBigbatch& pg, const std::string& wire) {
            BIGBATCH_REQUIRE(wire == "fp16" || wire == "bf16", bigbatch::InvalidArgument,
                             "wire '{}': the 16-bit wire hooks send fp16 or bf16", wire);
            return pg.codecs().wireCodec(wire == "fp16" ? bigbatch::DataType::kFloat16
                                                        : bigbatch::DataType::kBFloat16);
          },
          py::arg("wire"))
      .def(
          "_compressed_allreduce",
          [](ProcessGroupBigbatch& pg, at::Tensor buffer, int codec, int64_t bucket,
             const std::vector<std::tuple<int64_t, int64_t, std::vector<int64_t>, std::string>>&
                 slots) {
            std::vector<BucketSlot> layout;
            for (const auto& [offset, numel, shape, name] : slots) {
              layout.push_back({offset, numel, shape, name});
            }
            const c10::intrusive_ptr<::c10d::Work> work =
                pg.compressedAllreduce(buffer, codec, bucket, std::move(layout));
            return work;
          },
          py::arg("buffer"), py::arg("codec"), py::arg("bucket"), py::arg("slots"))
      .def(
          "_codec_state",
          [](ProcessGroupBigbatch& pg, int codec) {
            CodecRegistry::NamedState state;
            {
              py::gil_scoped_release release;
              pg.runOnCommThread([&] { state = pg.codecs().state(codec); });
            }
            py::dict out;
            for (const auto& [key, value] : state) out[py::str(key)] = value;
            return out;
          },
          py::arg("codec"))
      .def(
          "_load_codec_state",
          [](ProcessGroupBigbatch& pg, int codec, const std::map<std::string, at::Tensor>& dict) {
            CodecRegistry::NamedState state(dict.begin(), dict.end());
            py::gil_scoped_release release;
            pg.runOnCommThread([&] { pg.codecs().loadState(codec, state); });
          },
          py::arg("codec"), py::arg("state"));
}

// The process's functions: the creator, the MPI launch, the exit and the
// failure handling bigbatch_torch/__init__.py does.
void bindProcessFunctions(py::module& m) {
  m.def(
      "create",
      [](const c10::intrusive_ptr<::c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout, std::vector<int> globalRanks) {
        return createGroup(store, rank, size, timeout, std::move(globalRanks));
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("global_ranks") = std::vector<int>{},
      "The backend's creator (torch.distributed.Backend.register_backend): under an MPI "
      "launch an MPI communicator of `global_ranks` (the group's members' ranks in the "
      "default group; empty: the default group itself, every rank), else over UCX or Gloo "
      "(BIGBATCH_TRANSPORT) rendezvoused through `store` (torchrun, env://)");
  m.def("launched_by_mpi", &bigbatch::MpiCommunicator::launchedByMpi,
        "whether an MPI launcher (mpirun, or srun with PMI/PMIx) started this process");
  m.def(
      "mpi_rank_and_size",
      [] {
        const std::unique_ptr<bigbatch::MpiCommunicator> world =
            bigbatch::MpiCommunicator::world(bigbatch::MpiCommunicator::Threads::kMultiple);
        return std::make_pair(world->rank(), world->size());
      },
      "this process's rank and the job's size from MPI (initialising it): for launchers that "
      "set no OMPI_COMM_WORLD_* variables");
  m.def("live_groups", &ProcessGroupBigbatch::liveGroups,
        "bigbatch process groups of this process not yet destroyed");
  m.def(
      "shutdown_groups",
      [] { releaseGilToJoin([] { ProcessGroupBigbatch::shutdownAll(); }); },
      "at the interpreter's exit: every live group finishes its queued collectives and "
      "callbacks and stops its threads (ProcessGroupBigbatch::shutdownAll)");
  m.def("process_failure", &ProcessGroupBigbatch::processFailure,
        "the first failure of a bigbatch group in this process; '' if none");
  m.def(
      "abort_job",
      [](int code) { endJob(code); },
      py::arg("code"),
      "ends every rank of the job: MPI_Abort under MPI; else this process exits and its "
      "launcher (torchrun) ends the others");
}

}  // namespace

}  // namespace bigbatch::torch_backend

PYBIND11_MODULE(_C, m) {
  using namespace bigbatch::torch_backend;
  m.doc() = "bigbatch's torch.distributed backend (import bigbatch_torch, not this module)";
  ProcessGroupBigbatch::setJoinGuard(releaseGilToJoin);
  bindProcessGroup(m);
  bindProcessFunctions(m);
}
