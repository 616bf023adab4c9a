// Where a run stands and what it has added up so far — exactly what a
// checkpoint saves besides tensors (its position fields and its named
// counters), and what a resume restores. The run loop advances one RunState;
// a checkpoint is a snapshot of it.
// Internal to src/train; a plain value type.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/ckpt/checkpoint.h"
#include "bigbatch/train/trainer.h"
#include "step/train_step.h"

namespace bigbatch::train_detail {

struct RunState {
  // Position: the epoch in progress (1-based), its optimizer steps already
  // done, and the optimizer steps done in the whole run.
  int64_t epoch = 1;
  int64_t stepInEpoch = 0;
  int64_t globalStep = 0;

  // Totals over the run, every resume included.
  double trainSeconds = 0;  // training steps only (evaluation excluded), for throughput
  int64_t trainImages = 0;
  double elapsedS = 0;     // run seconds since run_start
  int64_t epochsDone = 0;  // epochs finished
  double bestAccuracy = 0;  // top-1
  double finalAccuracy = 0;
  double bestTop5 = 0;
  double finalTop5 = 0;
  bool reachedTarget = false;
  double timeToTargetS = -1;
  double firstLoss = 0;  // mean training loss of the first epoch
  double lastLoss = 0;   // ... of the last finished one

  // The epoch in progress: this rank's loss and accuracy sums (after a
  // resume, rank 0's also carry every rank's sums from before it) and the
  // steps skipped so far.
  StepTally epochTally;
  int64_t epochSkipped = 0;
  std::optional<LossScalerState> lossScale;  // when loss scaling is on

  // Checkpoint::counters, with `epochSums` (epochTally summed over the
  // ranks) for the interrupted epoch.
  std::map<std::string, double> toCounters(const StepTally& epochSums) const;
  // The state a checkpoint saved; `lead` (rank 0) carries the epoch's sums.
  // Counters missing from older checkpoints read as 0.
  static RunState fromCheckpoint(const Checkpoint& k, bool lead);
  // The TrainResult fields the state holds (accuracies, target, losses,
  // epochs, steps).
  void copyTo(TrainResult& r) const;
};

}  // namespace bigbatch::train_detail
