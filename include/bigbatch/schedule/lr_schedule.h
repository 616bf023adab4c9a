// Learning-rate schedule evaluated per step: linear warmup from
// `warmupStartFactor`·baseLr to baseLr over `warmupEpochs` (fractional
// allowed; Goyal et al. 2017), then cosine (Loshchilov & Hutter 2017),
// polynomial, step or constant decay to `endLr` at `totalEpochs`.
// Pure function of the epoch position; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

struct LrScheduleOptions {
  double baseLr = 0.1;
  double warmupEpochs = 0.0;
  double warmupStartFactor = 0.0;  // lr at step 0, as a fraction of baseLr
  std::string decay = "cosine";    // cosine | poly | step | constant
  double endLr = 0.0;
  double polyPower = 2.0;
  std::vector<int64_t> stepEpochs;  // for "step": multiply by stepGamma at each
  double stepGamma = 0.1;
  double totalEpochs = 1.0;
};

class LrSchedule {
 public:
  explicit LrSchedule(LrScheduleOptions options);
  // epoch: fractional position in training, e.g. step / stepsPerEpoch.
  double at(double epoch) const;
  const LrScheduleOptions& options() const { return options_; }

 private:
  LrScheduleOptions options_;
};

// The linear scaling rule (Goyal et al. 2017): lr = lrPer256 · globalBatch / 256.
inline double linearScaledLr(double lrPer256, int64_t globalBatch) {
  return lrPer256 * static_cast<double>(globalBatch) / 256.0;
}

}  // namespace bigbatch
