#include "bigbatch/launch/supervise_training.h"

#include <unistd.h>

#include <filesystem>

#include "bigbatch/common/error.h"
#include "bigbatch/launch/supervise_workers.h"

namespace bigbatch {

int superviseTraining(const Config& config, const TrainOptions& options, const SupervisedJob& job,
                      int argc, char** argv) {
  BIGBATCH_REQUIRE(config.getInt("ckpt.every_epochs") > 0 || config.getInt("ckpt.every_steps") > 0,
                   InvalidArgument,
                   "--max-restarts {} with checkpoints off (ckpt.every_epochs = 0 and "
                   "ckpt.every_steps = 0): a restart resumes from a checkpoint; set "
                   "ckpt.every_steps (e.g. 50) or ckpt.every_epochs = 1",
                   job.maxRestarts);
  checkRunCanStart(config, options, job.workers);
  SupervisorSettings s;
  s.launcher = job.launcher;
  s.workers = job.workers;
  s.threadsPerRank = static_cast<int>(config.getInt("run.threads"));
  s.maxRestarts = job.maxRestarts;
  s.minWorkers = job.minWorkers;
  s.batchPerRank = config.getInt("train.batch_size");
  s.globalBatch = s.batchPerRank * job.workers * config.getInt("train.accumulation_steps");
  checkWorldsKeepBatch(s);
  s.runDir = plannedRunDir(config, options);
  s.checkpointDir = config.getString("ckpt.dir").empty()
                        ? (std::filesystem::path(s.runDir) / "checkpoints").string()
                        : config.getString("ckpt.dir");
  std::error_code ec;
  std::filesystem::create_directories(s.runDir, ec);
  BIGBATCH_REQUIRE(!ec && access(s.runDir.c_str(), W_OK) == 0, IoError,
                   "run directory '{}' cannot be created or written; give --run-dir a directory "
                   "you can write",
                   s.runDir);
  std::filesystem::create_directories(s.checkpointDir, ec);
  BIGBATCH_REQUIRE(!ec && access(s.checkpointDir.c_str(), W_OK) == 0, IoError,
                   "checkpoint directory '{}' cannot be created or written, so a restart would "
                   "have nothing to resume from; set ckpt.dir to a directory you can write",
                   s.checkpointDir);
  return superviseWorkers(s, argc, argv);
}

}  // namespace bigbatch
