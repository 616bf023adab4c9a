#include "run/run_start.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>

#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/collectives/collectives.h"
#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/comm/world.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/hash.h"
#include "bigbatch/common/launch_slot.h"
#include "bigbatch/common/logging.h"
#include "bigbatch/common/rank_placement.h"
#include "bigbatch/common/supervision_env.h"
#include "bigbatch/models/scripted_model.h"
#include "bigbatch/train/config_schema.h"
#include "recipe/recipe.h"
#include "training_data.h"

namespace bigbatch::train_detail {
namespace {

std::string utcStamp() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::gmtime(&now));
  return buf;
}

std::string runName(const Config& c, const TrainOptions& o) {
  std::string name = c.getString("run.name");
  if (name.empty()) {
    name = o.configPath.empty() ? "run" : std::filesystem::path(o.configPath).stem().string();
  }
  return name;
}

std::string resolveRunDir(const Config& c, const TrainOptions& o) {
  if (!o.runDir.empty()) return o.runDir;
  if (!c.getString("run.dir").empty()) return c.getString("run.dir");
  return (std::filesystem::path(c.getString("run.out_dir")) / (runName(c, o) + "-" + utcStamp()))
      .string();
}

// A 63-bit FNV-1a hash of the resolved config, for the rank agreement check.
int64_t configHash(const Config& c) {
  const std::string text = c.toToml();
  return static_cast<int64_t>(fnv1a64(text.data(), text.size()) >> 1);
}

// `--resume auto` continues this run and nothing else: the supervisor and
// the Slurm example pass it on every start, so a checkpoint of another
// configuration found there (an earlier run in the same directory) must
// not silently become this run. An explicit --resume PATH may change
// keys (they are reported).
void refuseAutoResumeOfAnotherRun(const std::string& resume, const ResumePoint& point,
                                  const std::vector<std::string>& changed) {
  BIGBATCH_REQUIRE(resume != "auto" || changed.empty(), InvalidArgument,
                   "--resume auto found '{}', which another configuration wrote ({}); auto only "
                   "continues the same run. Continue it with these changes by giving the file: "
                   "--resume {}; or start a new run with --overwrite (its checkpoints are "
                   "removed) or another --run-dir",
                   point.path, fmt::join(changed, ", "), point.path);
}

// A new run's checkpoint directory. Inside its run directory (the
// default) every checkpoint there is the run's own: --overwrite removes the
// earlier run's, which would otherwise stay beside the new ones — pruned
// against, and taken by a later --resume auto. A ckpt.dir of the user's may
// be shared: each checkpoint says which run wrote it (Checkpoint::runDir),
// --overwrite removes only this run directory's, and a new run that finds
// another run's checkpoints there is refused — before anything of the
// earlier run in its own directory is touched — since its own would take
// their names.
void refuseForeignCheckpoints(const Config& c, const std::string& runDir) {
  if (c.getString("ckpt.dir").empty()) return;
  const std::string dir = checkpointDirOf(c, runDir);
  if (!std::filesystem::is_directory(dir)) return;
  const std::vector<std::string> others =
      CheckpointDir(dir, 1).otherOwners(checkpointOwner(runDir));
  BIGBATCH_REQUIRE(others.empty(), InvalidArgument,
                   "ckpt.dir '{}' holds checkpoints of another run ({}): this run's would take "
                   "their names; give each run a ckpt.dir of its own, or remove them",
                   dir,
                   others.empty() || others[0].empty() ? "one that does not say which" : others[0]);
}

void removeOwnCheckpoints(const Config& c, const std::string& runDir) {
  const std::string dir = checkpointDirOf(c, runDir);
  if (!std::filesystem::is_directory(dir)) return;
  const bool shared = !c.getString("ckpt.dir").empty();
  const int removed = CheckpointDir(dir, 1).removeAll(shared ? checkpointOwner(runDir) : "");
  if (removed > 0) {
    fmt::print("--overwrite: removed the earlier run's {} checkpoint(s) from {}\n", removed, dir);
  }
}

// Under bigbatch's supervisor, rank 0 must see the run directory the
// supervisor sees: it reads this run's checkpoints, step marks and
// placement there, and takes a run without summary.json for one that did
// not finish. The supervisor leaves its identity in RUN_DIR/.supervisor.
void checkSupervisorSeesRunDir(const std::string& runDir) {
  const char* supervisor = std::getenv(kSupervisorEnv);
  if (supervisor == nullptr || *supervisor == '\0') return;
  std::ifstream in(std::filesystem::path(runDir) / ".supervisor");
  std::string seen;
  std::getline(in, seen);
  BIGBATCH_REQUIRE(seen == supervisor, IoError,
                   "run directory '{}' is not the one bigbatch's supervisor ({}) sees ({}): it "
                   "reads the run's checkpoints and files there, so the run directory must be on "
                   "a file system every host shares (NFS, Lustre, ...); give --run-dir such a "
                   "path",
                   runDir, supervisor,
                   seen.empty() ? "its .supervisor file is not there" : "another supervisor's is");
}

// Where every rank runs, gathered on rank 0 — one small collective every
// rank makes, whatever its environment says, so the ranks never disagree
// on it — and written where the supervisor asked (kPlacementFileEnv): after
// a failure it leaves the failed rank's actual place out, whatever mapping
// the launcher used. Each rank's record is padded to kRecordBytes.
void reportPlacement(Communicator& comm, int slot) {
  constexpr size_t kRecordBytes = 1024;
  RankPlace mine;
  mine.rank = comm.rank();
  mine.host = thisHost();
  // Under Slurm its own name for the node: what srun's --nodelist takes
  // (a host may call itself by another, e.g. its FQDN).
  if (const char* node = std::getenv("SLURMD_NODENAME"); node != nullptr && *node != '\0') {
    mine.host.name = node;
  }
  mine.localRank = comm.localRank();
  mine.slot = slot;
  std::string json = rankPlaceJson(mine);
  while (json.size() >= kRecordBytes && !mine.host.addresses.empty()) {
    mine.host.addresses.pop_back();  // a host of many addresses: its first ones say it
    json = rankPlaceJson(mine);
  }
  std::vector<char> all(kRecordBytes * static_cast<size_t>(comm.size()), '\0');
  std::copy(json.begin(), json.begin() + std::min(json.size(), kRecordBytes - 1),
            all.begin() + static_cast<std::ptrdiff_t>(kRecordBytes * comm.rank()));
  if (comm.size() > 1) allgather(comm, all.data(), all.size(), DataType::kUInt8);
  const char* path = std::getenv(kPlacementFileEnv);
  if (comm.rank() != 0 || path == nullptr || *path == '\0') return;
  std::vector<RankPlace> places;
  for (int r = 0; r < comm.size(); ++r) {
    places.push_back(parseRankPlace(all.data() + kRecordBytes * static_cast<size_t>(r)));
  }
  writeRankPlacement(path, places);
}

}  // namespace

RunStart startRun(Config& c, const TrainOptions& o, MlperfLogger& ml) {
  RunStart s;
  // The ranks: given; the launcher's world (MPI's under mpirun or srun, UCX
  // or Gloo over the store under torchrun: comm/world.h); or this process
  // alone.
  s.comm = o.comm;
  if (!s.comm) {
    if (launchedByLauncher()) {
      s.ownedComm = connectWorld(std::chrono::milliseconds(
          static_cast<int64_t>(c.getFloat("comm.timeout_s") * 1000.0)));
    } else {
      s.ownedComm = std::move(makeInProcessGroup(1)[0]);
    }
    s.comm = s.ownedComm.get();
  }
  Communicator& comm = *s.comm;
  comm.setTimeoutMs(static_cast<int64_t>(c.getFloat("comm.timeout_s") * 1000.0));
  s.rank = comm.rank();
  s.worldSize = comm.size();
  const int rank = s.rank;
  if (!o.comm) {
    setErrorRank(rank);
    s.supervisorWatch = SupervisorWatch::fromEnvironment();
  }
  initLogging(rank, o.verbosity);

  std::exception_ptr setupError;
  // The device first (a refusal must not leave a run directory behind);
  // then the resume: every rank finds and reads the same checkpoint itself.
  try {
    // The slot, not the local rank: a slot the supervisor dropped (a lost
    // GPU) is not used again (common/launch_slot.h).
    s.slot = launchSlot(comm.localRank());
    s.device = resolveRunDevice(c.getString("run.device"), s.slot, comm.localSize(),
                                {c.getBool("amp.tf32"), c.getBool("run.deterministic")});
    s.resume = findResumePoint(c, o.resume, o.runDir, runName(c, o));
    if (s.resume) {
      const int64_t accumulation = checkResumeCompatible(c, s.resume->checkpoint, s.worldSize,
                                                         s.resume->path, &s.changedKeys);
      refuseAutoResumeOfAnotherRun(o.resume, *s.resume, s.changedKeys);
      c.setValue("train.accumulation_steps", accumulation, "--resume");
    }
  } catch (const std::exception&) {
    setupError = std::current_exception();
  }
  if (rank == 0 && !setupError) {
    try {
      TrainOptions dirOptions = o;
      if (s.resume && !s.resume->runDir.empty()) dirOptions.runDir = s.resume->runDir;
      const std::string runDir = resolveRunDir(c, dirOptions);
      checkSupervisorSeesRunDir(runDir);
      if (!s.resume) refuseForeignCheckpoints(c, runDir);
      s.runDir =
          std::make_unique<RunDir>(runDir, o.overwrite, s.resume ? s.resume->checkpoint.epoch : 0);
      if (!s.resume && o.overwrite) removeOwnCheckpoints(c, s.runDir->path());
      s.runDir->writeText("config.toml", c.toToml());
      // Everything logged, debug lines too (the tuner's choices, say):
      // the console shows them at -v.
      if (!o.comm) addLogFile(s.runDir->file("train.log"));
      ml.open(s.runDir->file("mlperf.log"), /*echo=*/false);
    } catch (const std::exception&) {
      setupError = std::current_exception();
    }
  }
  // Rank agreement before any work: every rank's set-up succeeded, all were
  // started with the same config, found the same checkpoint, and either all
  // or none have an onStep callback, which adds a collective to every step
  // (one 48-byte collective).
  const int64_t hash = configHash(c);
  const int64_t resumeStep = s.resume ? s.resume->checkpoint.globalStep : -1;
  const int64_t onStep = o.onStep ? 1 : 0;
  int64_t v[6] = {setupError ? rank + 1 : 0, hash, -hash, resumeStep, onStep, -onStep};
  if (s.worldSize > 1) allreduceMaxInt64(comm, v, 6, /*tag=*/0x7e10);
  if (setupError) std::rethrow_exception(setupError);
  BIGBATCH_REQUIRE(v[0] == 0, Error, "rank {} failed to set up the run (see its message)",
                   v[0] - 1);
  BIGBATCH_REQUIRE(v[1] == -v[2], MismatchError,
                   "the ranks were started with different configs (config hashes differ); start "
                   "every rank with the same recipe and --set options");
  BIGBATCH_REQUIRE(v[3] == resumeStep, MismatchError,
                   "the ranks found different checkpoints to resume from (step {} here, up to {} "
                   "on another rank); give --resume an explicit checkpoint file",
                   resumeStep, v[3]);
  BIGBATCH_REQUIRE(v[4] == -v[5], MismatchError,
                   "TrainOptions::onStep is set on some ranks only ({} here); it adds a "
                   "collective to every step, so set it on every rank or on none",
                   onStep ? "set" : "not set");
  reportPlacement(comm, s.slot);
  return s;
}

}  // namespace bigbatch::train_detail

namespace bigbatch {

std::string plannedRunDir(const Config& config, const TrainOptions& options) {
  return train_detail::resolveRunDir(config, options);
}

void checkModelLoads(const Config& config) {
  using namespace train_detail;
  if (config.getString("model.name") != "torchscript") return;
  const ImageShape shape = checkTrainingDataOpens(dataOptionsFor(config));
  const ModelOptions options = bindRecipeKeys(config).model;
  BIGBATCH_REQUIRE(!options.path.empty(), InvalidArgument,
                   "model.name = \"torchscript\" needs model.path, the module file saved from "
                   "Python with torch.jit.script(model).save(FILE)");
  ScriptedClassifierImpl model(options.path);
  model.checkLogits(shape.channels, shape.height, shape.width, shape.classes);
}

void checkRunCanStart(const Config& config, const TrainOptions& o, int worldSize) {
  using namespace train_detail;
  validateTrainingData(config);
  checkModelLoads(config);
  const std::optional<ResumePoint> resume =
      findResumePoint(config, o.resume, o.runDir, runName(config, o));
  if (resume) {
    std::vector<std::string> changed;
    checkResumeCompatible(config, resume->checkpoint, worldSize, resume->path, &changed);
    refuseAutoResumeOfAnotherRun(o.resume, *resume, changed);
    return;  // the run directory continues, and the checkpoint holds the weights
  }
  if (!o.overwrite) {
    // A timestamped default directory is new; a named one may hold a run.
    const std::string dir = !o.runDir.empty() ? o.runDir : config.getString("run.dir");
    if (!dir.empty()) RunDir::refuseExistingRun(dir);
  }
  refuseForeignCheckpoints(config, plannedRunDir(config, o));
  if (!o.initFrom.empty()) readStateDict(o.initFrom);
}

}  // namespace bigbatch

namespace bigbatch::train_detail {

void announceResume(const RunStart& s, const Config& c, const TrainOptions& o) {
  if (s.resume) {
    const Checkpoint& k = s.resume->checkpoint;
    fmt::print("resuming from {} (epoch {}, step {} of it, {} steps done){}\n", s.resume->path,
               k.epoch, k.stepInEpoch, k.globalStep,
               k.worldSize != s.worldSize
                   ? fmt::format("; it was written by {} rank(s): global batch {} kept with {} "
                                 "accumulation step(s), rank r takes rank (r mod {})'s BatchNorm "
                                 "statistics",
                                 k.worldSize, k.globalBatch, c.getInt("train.accumulation_steps"),
                                 k.worldSize)
                   : std::string());
    if (!s.changedKeys.empty()) {
      fmt::print("  config changed since the checkpoint (the continuation is not bit-exact): {}\n",
                 fmt::join(s.changedKeys, ", "));
    }
    std::fflush(stdout);
  } else if (!o.resume.empty()) {
    fmt::print("--resume {}: no checkpoint found; starting from scratch\n", o.resume);
  }
}

}  // namespace bigbatch::train_detail
