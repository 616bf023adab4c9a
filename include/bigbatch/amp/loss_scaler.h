// Dynamic loss scaling (Micikevicius et al. 2018, "Mixed Precision Training";
// the form of PyTorch's GradScaler and Megatron's hysteresis): the loss is
// multiplied by a scale S before backward so small gradients survive 16-bit
// arithmetic (fp16 compute, or fp16 on the wire); the optimizer reads the
// gradients times 1/S (StepHyper::gradScale), and its norm pass doubles as
// the overflow check. After each step:
//   clean   -> count it; after `growthInterval` clean steps in a row S ×= growthFactor (≤ maxScale)
//   inf/NaN -> skip the step; after `hysteresis` such steps since the last
//              growth or back-off, S ×= backoffFactor (≥ minScale)
// Scales stay powers of two when the factors are, so unscaling is exact.
//
// Threading: plain value type; one trainer thread owns it.
#pragma once

#include <cstdint>

#include "bigbatch/amp/loss_scale_rule.h"

namespace bigbatch {

struct LossScalerOptions {
  double initScale = 65536.0;      // 2^16
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  int64_t growthInterval = 2000;   // clean steps before growing
  double minScale = 1.0;           // floor
  double maxScale = 16777216.0;    // ceiling, 2^24
  int64_t hysteresis = 1;          // overflowing steps before a back-off
};


class DynamicLossScaler {
 public:
  // Throws InvalidArgument naming the bad option (e.g. growthFactor <= 1).
  explicit DynamicLossScaler(LossScalerOptions options = {});

  double scale() const { return state_.scale; }
  // 1 / scale, for StepHyper::gradScale.
  double inverse() const { return 1.0 / state_.scale; }
  // Records a step's outcome and returns whether its update may be applied
  // (false: the gradients overflowed; skip the step).
  bool update(bool finite);
  // True when the scale is at the floor: an overflow now is not a matter of
  // the scale but of the training itself (diverged).
  bool atFloor() const { return state_.scale <= options_.minScale; }

  const LossScalerOptions& options() const { return options_; }
  // The options each step's update reads (loss_scale_rule.h).
  LossScaleRule rule() const;
  const LossScalerState& state() const { return state_; }
  // Checks the values lie within the options' range; throws InvalidArgument.
  void loadState(const LossScalerState& state);

 private:
  LossScalerOptions options_;
  LossScalerState state_;
};

}  // namespace bigbatch
