// Resuming a run: which checkpoint `--resume auto|PATH` means, which run
// directory continues, and whether the checkpoint fits the config.
//
//   auto  the newest loadable checkpoint of this run: in ckpt.dir, or in
//         <run dir>/checkpoints when the run directory is given (--run-dir or
//         run.dir), else in the newest <run.out_dir>/<run name>-* directory
//         that has one; none anywhere: a fresh start (said in the log).
//         auto continues only the same run: a checkpoint whose config
//         differs in a key that shapes the run (checkResumeCompatible's
//         `changed`) is refused, naming the keys (startRun); in a ckpt.dir
//         of the user's, only a checkpoint this run directory wrote is
//         taken (another run's is refused, naming it).
//   PATH  a checkpoint file, or a directory holding checkpoints (or a run
//         directory with a checkpoints/ folder); none there is an error.
//
// Pure functions of the filesystem and config: every rank computes the same
// answer. Thread-compatible.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bigbatch/ckpt/checkpoint.h"
#include "bigbatch/common/config.h"

namespace bigbatch {

struct ResumePoint {
  std::string path;    // the checkpoint file
  std::string runDir;  // the run directory that continues ("" : a new one)
  Checkpoint checkpoint;
};

// Where a run in `runDir` keeps its checkpoints: ckpt.dir, else
// <runDir>/checkpoints.
std::string checkpointDirOf(const Config& c, const std::string& runDir);

// How a checkpoint names the run that wrote it (Checkpoint::runDir): the
// run directory, absolute and normalised, so that `runs/a` and
// `./runs/a/` are one run.
std::string checkpointOwner(const std::string& runDir);

std::optional<ResumePoint> findResumePoint(const Config& c, const std::string& resume,
                                           const std::string& runDirOption,
                                           const std::string& runName);

// Refuses a checkpoint whose model, data, seed or optimizer differ from
// `current` (InvalidArgument naming the key, both values and the fix), or
// whose global batch cannot be kept on `worldSize` ranks. Returns the
// accumulation steps that keep the checkpoint's global batch and, in
// `changed`, the other keys whose values differ (allowed, e.g. a longer
// epoch budget; a bit-exact continuation needs none).
int64_t checkResumeCompatible(const Config& current, const Checkpoint& ckpt, int worldSize,
                              const std::string& origin, std::vector<std::string>* changed);

}  // namespace bigbatch
