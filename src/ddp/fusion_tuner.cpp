#include "fusion_tuner.h"

#include <algorithm>
#include <string>

#include "bigbatch/common/logging.h"
#include "bigbatch/ddp/bucket_layout.h"

namespace bigbatch::ddp_detail {

FusionTuner::FusionTuner(const std::vector<int64_t>& numels, int steps) : steps_(steps) {
  for (size_t c = size_t{16} << 10;; c *= 4) {
    candidates_.push_back(c);
    if (layoutBuckets(numels, c).size() == 1 || c >= (size_t{64} << 20)) break;
  }
  times_.resize(candidates_.size());
}

size_t FusionTuner::afterStep(double seconds, size_t current, JobCollectives& job) {
  if (settled_) return 0;
  if (untimed_ > 0) {
    --untimed_;
    return 0;
  }
  std::vector<double>& times = times_[candidate_];
  times.push_back(seconds);
  if (static_cast<int>(times.size()) < steps_) return 0;
  if (candidate_ + 1 < candidates_.size()) {
    untimed_ = 1;
    return candidates_[++candidate_];
  }
  // Every candidate timed: the slowest rank's median of each; the least wins.
  std::vector<double> medians;
  for (auto t : times_) {
    std::sort(t.begin(), t.end());
    medians.push_back(t[t.size() / 2]);
  }
  medians = job.allreduceMax(medians);
  const auto best =
      static_cast<size_t>(std::min_element(medians.begin(), medians.end()) - medians.begin());
  std::string table;
  for (size_t c = 0; c < candidates_.size(); ++c) {
    table +=
        fmt::format("{}{} KiB {:.2f} ms", c ? ", " : "", candidates_[c] >> 10, medians[c] * 1e3);
  }
  if (job.rank() == 0) {
    log().info(
        "ddp.fusion_bytes = auto chose {} bytes on {} ranks (slowest rank's median step: {})",
        candidates_[best], job.size(), table);
  }
  settled_ = true;
  return candidates_[best] != current ? candidates_[best] : 0;
}

}  // namespace bigbatch::ddp_detail
