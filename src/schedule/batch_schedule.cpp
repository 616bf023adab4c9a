#include "bigbatch/schedule/batch_schedule.h"

#include <cmath>

#include "bigbatch/common/error.h"

namespace bigbatch {

BatchSchedule::BatchSchedule(BatchScheduleOptions options) : options_(std::move(options)) {
  const auto& o = options_;
  BIGBATCH_REQUIRE(o.epochs.size() == o.factors.size(), InvalidArgument,
                   "schedule.batch_epochs has {} entries but schedule.batch_factors {}; give one "
                   "factor per epoch",
                   o.epochs.size(), o.factors.size());
  for (size_t i = 0; i < o.epochs.size(); ++i) {
    BIGBATCH_REQUIRE(o.epochs[i] >= 1 && (i == 0 || o.epochs[i] > o.epochs[i - 1]), InvalidArgument,
                     "schedule.batch_epochs must be >= 1 and strictly increasing (entry {} is {})",
                     i, o.epochs[i]);
    BIGBATCH_REQUIRE(
        o.factors[i] >= 1, InvalidArgument,
        "schedule.batch_factors entry {} is {}; factors multiply the initial batch and "
        "must be >= 1",
        i, o.factors[i]);
  }
  BIGBATCH_REQUIRE(o.lrRule == "linear" || o.lrRule == "sqrt" || o.lrRule == "none",
                   InvalidArgument, "schedule.batch_lr_rule '{}' is not one of linear, sqrt, none",
                   o.lrRule);
}

int64_t BatchSchedule::factor(int64_t epoch) const {
  int64_t f = 1;
  for (size_t i = 0; i < options_.epochs.size(); ++i) {
    if (epoch >= options_.epochs[i]) f = options_.factors[i];
  }
  return f;
}

double BatchSchedule::lrMultiplier(int64_t epoch) const {
  const double f = static_cast<double>(factor(epoch));
  if (options_.lrRule == "linear") return f;
  if (options_.lrRule == "sqrt") return std::sqrt(f);
  return 1.0;
}

}  // namespace bigbatch
