#include "bigbatch/train/resume.h"

#include <algorithm>
#include <filesystem>

#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"

namespace bigbatch {
namespace fs = std::filesystem;
namespace {

std::optional<std::string> latestIn(const std::string& dir) {
  if (!fs::is_directory(dir)) return std::nullopt;
  return CheckpointDir(dir, 1).latest();
}

// The run directory a checkpoint file belongs to: <run>/checkpoints/ckpt-N.pt.
std::string runDirOf(const std::string& checkpoint) {
  const fs::path dir = fs::path(checkpoint).parent_path();
  if (dir.filename() == "checkpoints" && fs::exists(dir.parent_path() / "config.toml")) {
    return dir.parent_path().string();
  }
  return "";
}

}  // namespace

std::string checkpointOwner(const std::string& runDir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(runDir), ec);
  if (ec) p = fs::absolute(runDir).lexically_normal();
  std::string out = p.string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::string checkpointDirOf(const Config& c, const std::string& runDir) {
  if (!c.getString("ckpt.dir").empty()) return c.getString("ckpt.dir");
  return (fs::path(runDir) / "checkpoints").string();
}

std::optional<ResumePoint> findResumePoint(const Config& c, const std::string& resume,
                                           const std::string& runDirOption,
                                           const std::string& runName) {
  if (resume.empty()) return std::nullopt;
  std::string runDir = !runDirOption.empty() ? runDirOption : c.getString("run.dir");
  std::optional<std::string> path;
  if (resume == "auto") {
    if (!c.getString("ckpt.dir").empty() || !runDir.empty()) {
      path = latestIn(checkpointDirOf(c, runDir));
    } else {
      // The newest earlier run of this name that left a checkpoint.
      std::vector<fs::path> runs;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(c.getString("run.out_dir"), ec)) {
        if (e.is_directory() && e.path().filename().string().rfind(runName + "-", 0) == 0) {
          runs.push_back(e.path());
        }
      }
      std::sort(runs.rbegin(), runs.rend());  // names end in a UTC timestamp
      for (const auto& r : runs) {
        if ((path = latestIn(checkpointDirOf(c, r.string())))) {
          runDir = r.string();
          break;
        }
      }
    }
    if (!path) return std::nullopt;
  } else if (fs::is_directory(resume)) {
    path = latestIn(resume);
    if (!path) path = latestIn((fs::path(resume) / "checkpoints").string());
    BIGBATCH_REQUIRE(
        path.has_value(), InvalidArgument,
        "--resume {}: no loadable checkpoint there (ckpt-*.pt); give a checkpoint file, "
        "or use --resume auto",
        resume);
  } else {
    BIGBATCH_REQUIRE(fs::exists(resume), InvalidArgument,
                     "--resume {}: no such file or directory; give a checkpoint (ckpt-*.pt), a "
                     "directory of them, or auto",
                     resume);
    path = resume;
  }
  ResumePoint p;
  p.path = *path;
  p.checkpoint = readCheckpoint(p.path);
  p.runDir = !runDir.empty() ? runDir : runDirOf(p.path);
  // A ckpt.dir shared by runs: auto takes this run's own checkpoint only.
  const std::string writer = p.checkpoint.runDir;
  BIGBATCH_REQUIRE(resume != "auto" || c.getString("ckpt.dir").empty() || writer.empty() ||
                       p.runDir.empty() || writer == checkpointOwner(p.runDir),
                   InvalidArgument,
                   "--resume auto found '{}' in ckpt.dir, which another run wrote ({}), not this "
                   "one ({}); continue that run with --resume {} --run-dir {}, or give this run "
                   "a ckpt.dir of its own",
                   p.path, writer, checkpointOwner(p.runDir), p.path, writer);
  return p;
}

int64_t checkResumeCompatible(const Config& current, const Checkpoint& ckpt, int worldSize,
                              const std::string& origin, std::vector<std::string>* changed) {
  Config saved = defaultTrainingConfig();
  saved.mergeToml(ckpt.config, origin + " (its config)");
  // What defines the trajectory: another value here is another run.
  const std::vector<std::string> identity = {
      "run.seed", "data.dataset", "data.train_samples", "data.flip", "data.pad_crop",
      "model.name", "model.widths", "model.blocks", "model.bn_eps", "model.zero_init_residual",
      "model.channels_last", "optim.name", "train.virtual_workers"};
  for (const auto& key : identity) {
    BIGBATCH_REQUIRE(
        saved.valueText(key) == current.valueText(key), InvalidArgument,
        "cannot resume from '{}': it was written with {} = {}, this run has {}; resume "
        "with the checkpoint's config (its run directory's config.toml), or start a "
        "new run without --resume",
        origin, key, saved.valueText(key), current.valueText(key));
  }
  // The global batch stays; the accumulation steps absorb a new world size.
  const int64_t perRank = current.getInt("train.batch_size");
  const int64_t slots = perRank * worldSize;
  BIGBATCH_REQUIRE(
      ckpt.globalBatch % slots == 0, InvalidArgument,
      "cannot resume from '{}' on {} rank(s): its global batch {} is not a multiple of "
      "{} rank(s) x train.batch_size {}; choose a train.batch_size that divides {} / {}",
      origin, worldSize, ckpt.globalBatch, worldSize, perRank, ckpt.globalBatch, worldSize);
  const int64_t accumulation = ckpt.globalBatch / slots;
  if (changed) {
    changed->clear();
    for (const auto& f : current.schema()) {
      // Keys that do not touch the weights' trajectory (when and how often
      // to evaluate, stop or restart, how much to buffer). An evaluation
      // also agrees the ranks' BatchNorm statistics (train.average_bn_stats),
      // so train.eval_every may change those buffers, never a weight.
      static const std::vector<std::string> neutral = {
          "train.accumulation_steps", "run.workers", "run.dir", "run.name", "run.out_dir",
          "comm.timeout_s", "train.stop_at_target", "train.target_accuracy",
          "train.stop_after_epoch", "train.eval_every", "train.eval_batch_size",
          "data.prefetch_batches", "data.cache_mb", "run.max_restarts", "run.min_workers"};
      if (std::find(neutral.begin(), neutral.end(), f.key) != neutral.end() ||
          f.key.rfind("fault.", 0) == 0 || f.key.rfind("ckpt.", 0) == 0 ||
          f.key.rfind("mlperf.", 0) == 0) {
        continue;
      }
      if (saved.valueText(f.key) != current.valueText(f.key)) {
        changed->push_back(fmt::format("{} ({} -> {})", f.key, saved.valueText(f.key),
                                       current.valueText(f.key)));
      }
    }
  }
  return accumulation;
}

}  // namespace bigbatch
