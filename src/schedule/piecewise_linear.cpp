#include "bigbatch/schedule/piecewise_linear.h"

#include "bigbatch/common/error.h"

namespace bigbatch {

PiecewiseLinear::PiecewiseLinear(std::vector<double> epochs, std::vector<double> values,
                                 double constant, const char* what)
    : epochs_(std::move(epochs)), values_(std::move(values)), constant_(constant) {
  BIGBATCH_REQUIRE(epochs_.size() == values_.size(), InvalidArgument,
                   "{}: {} epochs but {} values; give one value per epoch", what, epochs_.size(),
                   values_.size());
  for (size_t i = 1; i < epochs_.size(); ++i) {
    BIGBATCH_REQUIRE(epochs_[i] >= epochs_[i - 1], InvalidArgument,
                     "{}: epochs must not decrease ({} after {})", what, epochs_[i],
                     epochs_[i - 1]);
  }
}

double PiecewiseLinear::at(double epoch) const {
  if (epochs_.empty()) return constant_;
  if (epoch <= epochs_.front()) return values_.front();
  for (size_t i = 1; i < epochs_.size(); ++i) {
    if (epoch < epochs_[i]) {
      const double f = (epoch - epochs_[i - 1]) / (epochs_[i] - epochs_[i - 1]);
      return values_[i - 1] + f * (values_[i] - values_[i - 1]);
    }
  }
  return values_.back();
}

}  // namespace bigbatch
