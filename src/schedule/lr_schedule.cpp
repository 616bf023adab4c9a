#include "bigbatch/schedule/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "bigbatch/common/error.h"

namespace bigbatch {

LrSchedule::LrSchedule(LrScheduleOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  BIGBATCH_REQUIRE(
      o.decay == "cosine" || o.decay == "poly" || o.decay == "step" || o.decay == "constant",
      InvalidArgument, "schedule.decay '{}' is not one of cosine, poly, step, constant", o.decay);
  BIGBATCH_REQUIRE(o.warmupEpochs >= 0 && o.warmupEpochs <= o.totalEpochs, InvalidArgument,
                   "schedule.warmup_epochs = {} must lie in [0, train.epochs = {}]", o.warmupEpochs,
                   o.totalEpochs);
}

double LrSchedule::at(double epoch) const {
  const auto& o = options_;
  if (epoch < o.warmupEpochs) {
    const double f = epoch / o.warmupEpochs;
    return o.baseLr * (o.warmupStartFactor + (1.0 - o.warmupStartFactor) * f);
  }
  const double span = std::max(o.totalEpochs - o.warmupEpochs, 1e-12);
  const double t = std::clamp((epoch - o.warmupEpochs) / span, 0.0, 1.0);
  if (o.decay == "cosine") {
    return o.endLr + (o.baseLr - o.endLr) * 0.5 * (1.0 + std::cos(M_PI * t));
  }
  if (o.decay == "poly") {
    return o.endLr + (o.baseLr - o.endLr) * std::pow(1.0 - t, o.polyPower);
  }
  if (o.decay == "step") {
    double lr = o.baseLr;
    for (int64_t e : o.stepEpochs) {
      if (epoch >= static_cast<double>(e)) lr *= o.stepGamma;
    }
    return lr;
  }
  return o.baseLr;
}

}  // namespace bigbatch
