// A value that follows straight lines between (epoch, value) points and stays
// constant before the first and after the last; with no points, a constant.
// Drives the momentum schedule (e.g. 0.85 -> 0.95 over warmup, as in the
// one-cycle and MoXing recipes). Pure function of the epoch position;
// thread-safe.
#pragma once

#include <vector>

namespace bigbatch {

class PiecewiseLinear {
 public:
  // epochs must be non-decreasing and as many as values; throws
  // InvalidArgument naming `what` otherwise.
  PiecewiseLinear(std::vector<double> epochs, std::vector<double> values, double constant,
                  const char* what = "schedule");
  double at(double epoch) const;

 private:
  std::vector<double> epochs_, values_;
  double constant_;
};

}  // namespace bigbatch
