#include "bigbatch/amp/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "bigbatch/common/error.h"

namespace bigbatch {

DynamicLossScaler::DynamicLossScaler(LossScalerOptions o) : options_(o) {
  BIGBATCH_REQUIRE(o.minScale > 0 && o.maxScale >= o.minScale && std::isfinite(o.maxScale),
                   InvalidArgument,
                   "loss scaler: need 0 < min_scale <= max_scale < inf (got min {} and max {})",
                   o.minScale, o.maxScale);
  BIGBATCH_REQUIRE(o.initScale >= o.minScale && o.initScale <= o.maxScale, InvalidArgument,
                   "loss scaler: init_scale {} lies outside [min_scale {}, max_scale {}]",
                   o.initScale, o.minScale, o.maxScale);
  BIGBATCH_REQUIRE(o.growthFactor > 1, InvalidArgument,
                   "loss scaler: growth_factor must be > 1 (got {})", o.growthFactor);
  BIGBATCH_REQUIRE(o.backoffFactor > 0 && o.backoffFactor < 1, InvalidArgument,
                   "loss scaler: backoff_factor must lie in (0, 1) (got {})", o.backoffFactor);
  BIGBATCH_REQUIRE(o.growthInterval >= 1 && o.hysteresis >= 1, InvalidArgument,
                   "loss scaler: growth_interval and hysteresis must be >= 1 (got {} and {})",
                   o.growthInterval, o.hysteresis);
  state_ = {o.initScale, 0, o.hysteresis};
}

LossScaleRule DynamicLossScaler::rule() const {
  const LossScalerOptions& o = options_;
  return {o.growthFactor, o.backoffFactor, o.growthInterval, o.minScale, o.maxScale, o.hysteresis};
}

bool DynamicLossScaler::update(bool finite) { return updateLossScale(state_, rule(), finite); }

void DynamicLossScaler::loadState(const LossScalerState& s) {
  BIGBATCH_REQUIRE(s.scale >= options_.minScale && s.scale <= options_.maxScale, InvalidArgument,
                   "loss scaler state: scale {} lies outside [min_scale {}, max_scale {}]", s.scale,
                   options_.minScale, options_.maxScale);
  BIGBATCH_REQUIRE(
      s.cleanSteps >= 0 && s.cleanSteps < options_.growthInterval && s.overflowsLeft >= 1 &&
          s.overflowsLeft <= options_.hysteresis,
      InvalidArgument,
      "loss scaler state: {} clean steps / {} overflows left do not fit growth_interval "
      "{} and hysteresis {}",
      s.cleanSteps, s.overflowsLeft, options_.growthInterval, options_.hysteresis);
  state_ = s;
}

}  // namespace bigbatch
