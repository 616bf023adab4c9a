// Writing the run's training checkpoints. A checkpoint needs every rank:
// each hands rank 0 its BatchNorm buffers and RNG state (they differ per
// rank) and its share of the interrupted epoch's loss and accuracy sums;
// rank 0 adds the weights, optimizer and loss-scaler state, the position in
// the data order, the run's totals and the allreduce's tuning (counters
// "allreduce_tuning.*"), and writes one file through
// CheckpointDir (temporary file, fsync, rename, then `latest`; the newest
// `ckpt.keep` are kept). With ckpt.background (the default) the step waits
// only for a snapshot of that state and the write goes on behind it
// (ckpt/background_writer.h); flush() waits for it.
//
// Internal to src/train. save() is a collective: every rank calls it at the
// same step, from the training thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "bigbatch/ckpt/background_writer.h"
#include "bigbatch/ckpt/checkpoint.h"
#include "bigbatch/common/config.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "bigbatch/models/model_options.h"
#include "watch/fault_injection.h"
#include "bigbatch/optim/optimizer.h"
#include "run/run_state.h"
#include "step/train_step.h"

namespace bigbatch::train_detail {

class RunCheckpointer {
 public:
  // `dir` and `keep` matter on rank 0 only (`lead`), which alone writes.
  RunCheckpointer(ImageClassifierImpl& model, DistributedDataParallel& ddp, JobCollectives& job,
                  const Optimizer& optimizer, const Config& config, FaultInjector& fault,
                  bool lead, const std::string& dir, const std::string& runDir, int keep,
                  bool background, int worldSize, int64_t globalBatch);

  // Collective: a snapshot of `state` (its epoch tally summed over the
  // ranks) with every rank's BatchNorm buffers and RNG state.
  void save(const RunState& state);
  // Returns once the last checkpoint is on disk (rethrows a write's error).
  void flush();
  // The checkpoints saved, and the seconds training waited for them in
  // save() and flush() (summary.json's checkpoint_wait_s).
  int64_t saves() const { return saves_; }
  double waitSeconds() const { return waitS_; }

 private:
  ImageClassifierImpl& model_;
  const std::vector<std::string> frozen_;  // frozen parameters: saved once, with the parameters
  DistributedDataParallel& ddp_;
  JobCollectives& job_;
  const Optimizer& optimizer_;
  const Config& config_;
  FaultInjector& fault_;
  const int worldSize_;
  const int64_t globalBatch_;
  const bool background_;
  const std::string owner_;  // the run directory a checkpoint names as its writer
  std::unique_ptr<BackgroundCheckpointWriter> writer_;  // rank 0 only
  int64_t saves_ = 0;
  double waitS_ = 0;
};

}  // namespace bigbatch::train_detail
