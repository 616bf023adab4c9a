// What a checkpoint carries besides tensors: the run's totals so far, the
// partial sums of the epoch it interrupted, and the loss scaler's state, as
// the named doubles of Checkpoint::counters (a resume continues them).
// Internal to src/train; a plain value type.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/train/trainer.h"

namespace bigbatch::train_detail {

struct RunTotals {
  double trainSeconds = 0;  // training steps only (evaluation excluded), for throughput
  int64_t trainImages = 0;
  double elapsedS = 0;      // run seconds since run_start, over every resume
  double bestAccuracy = 0;
  double finalAccuracy = 0;
  bool reachedTarget = false;
  double timeToTargetS = -1;
  double firstLoss = 0;
  double lastLoss = 0;
  int64_t epochs = 0;
  // The interrupted epoch (loss, correct and seen summed over the ranks).
  double epochLoss = 0;
  double epochCorrect = 0;
  double epochSeen = 0;
  int64_t epochSkipped = 0;
  std::optional<LossScalerState> lossScale;  // when loss scaling is on

  // The TrainResult fields a resume carries over (accuracies, target, losses,
  // epochs), in either direction.
  void copyFrom(const TrainResult& r);
  void copyTo(TrainResult& r) const;

  std::map<std::string, double> toCounters() const;
  // Missing keys read as 0 (checkpoints written before a key existed).
  static RunTotals fromCounters(const std::map<std::string, double>& counters);
};

}  // namespace bigbatch::train_detail
