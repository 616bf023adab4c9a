// The batch-size schedule (Smith et al. 2018, "Don't Decay the Learning Rate,
// Increase the Batch Size"; MoXing's dynamic batch size): from epoch
// epochs[i] on (1-based), the batch is factors[i] times the initial one, and
// the learning rate follows by the linear rule (× factor), the square-root
// rule (× √factor, Krizhevsky 2014) or not at all. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

struct BatchScheduleOptions {
  std::vector<int64_t> epochs;   // strictly increasing, >= 1
  std::vector<int64_t> factors;  // >= 1, one per epoch entry
  std::string lrRule = "linear";  // linear | sqrt | none
};

class BatchSchedule {
 public:
  explicit BatchSchedule(BatchScheduleOptions options);
  // Batch multiplier in (1-based) epoch `epoch`.
  int64_t factor(int64_t epoch) const;
  // Learning-rate multiplier that goes with it.
  double lrMultiplier(int64_t epoch) const;
  const BatchScheduleOptions& options() const { return options_; }

 private:
  BatchScheduleOptions options_;
};

}  // namespace bigbatch
