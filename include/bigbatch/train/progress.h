// Live progress of an epoch on rank 0's terminal. On a terminal: one bar,
// redrawn in place at most every 0.25 s (step/steps, img/s, loss, ETA). When
// stdout is not a terminal (CI, a log file, mpirun without a tty): a plain
// line every `plainIntervalS` seconds instead, so logs stay readable.
//
// Thread-compatible: the training thread owns it.
#pragma once

#include <chrono>
#include <cstdint>

namespace bigbatch {

class Progress {
 public:
  // enabled = false prints nothing (other ranks, --quiet).
  Progress(bool enabled, double plainIntervalS = 10.0);

  void startEpoch(int64_t epoch, int64_t epochs, int64_t steps);
  // After each step: images trained so far this epoch (all ranks) and the
  // running mean loss.
  void update(int64_t step, int64_t images, double meanLoss);
  // Whether update(step, ...) now would print (a caller whose figures cost
  // a wait for the GPU gathers them only then).
  bool due(int64_t step) const;
  // Erases the bar (before the epoch's summary line).
  void finishEpoch();

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_, tty_;
  double plainIntervalS_;
  int64_t epoch_ = 0, epochs_ = 0, steps_ = 0;
  Clock::time_point epochStart_, lastPrint_;
  bool drawn_ = false;
};

}  // namespace bigbatch
