#include "bigbatch/tune/asha.h"

#include <algorithm>
#include <cmath>

#include "bigbatch/common/error.h"

namespace bigbatch {

AshaScheduler::AshaScheduler(AshaOptions options) : options_(options) {
  BIGBATCH_REQUIRE(options_.minEpochs > 0 && options_.maxEpochs >= options_.minEpochs,
                   InvalidArgument,
                   "successive halving needs 0 < min epochs <= max epochs (got {} and {})",
                   options_.minEpochs, options_.maxEpochs);
  BIGBATCH_REQUIRE(options_.eta >= 2, InvalidArgument,
                   "successive halving keeps 1/eta of each rung: eta must be >= 2 (got {})",
                   options_.eta);
  BIGBATCH_REQUIRE(options_.maxTrials >= 1, InvalidArgument,
                   "the trial budget must be at least 1 (got {})", options_.maxTrials);
  // r_k = r_0·η^k for k < K = floor(log_η(R / r_0)), then R = maxEpochs:
  // as in Hyperband, each rung at least η times the one below, so the top is
  // never a near-duplicate of the rung under it (2, 6, 20 — not 2, 6, 18, 20).
  const int K = static_cast<int>(std::floor(
      std::log(options_.maxEpochs / options_.minEpochs) / std::log(options_.eta) + 1e-9));
  double r = options_.minEpochs;
  for (int k = 0; k < K; ++k, r *= options_.eta) epochs_.push_back(r);
  epochs_.push_back(options_.maxEpochs);
  done_.resize(epochs_.size());
}

std::optional<AshaScheduler::Job> AshaScheduler::next() {
  // Promotions first, from the highest rung below the top down: the deepest
  // work is the most informative and the closest to a result.
  for (int k = rungs() - 2; k >= 0; --k) {
    std::vector<Entry>& rung = done_[k];
    const size_t keep = rung.size() / static_cast<size_t>(options_.eta);
    if (keep == 0) continue;
    std::vector<size_t> order(rung.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    // Ties go to the earlier trial, not the earlier report: with several
    // workers the reports come in an order the clock decides.
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (better(rung[a].metric, rung[b].metric)) return true;
      return rung[a].metric == rung[b].metric && rung[a].trial < rung[b].trial;
    });
    for (size_t i = 0; i < keep; ++i) {
      Entry& e = rung[order[i]];
      if (e.promoted) continue;
      e.promoted = true;
      running_.emplace_back(e.trial, k + 1);
      return Job{e.trial, k + 1, epochs_[k + 1]};
    }
  }
  if (started_ < options_.maxTrials) {
    const int trial = started_++;
    running_.emplace_back(trial, 0);
    return Job{trial, 0, epochs_[0]};
  }
  return std::nullopt;
}

void AshaScheduler::report(int trial, int rung, double metric) {
  auto it = std::find(running_.begin(), running_.end(), std::make_pair(trial, rung));
  BIGBATCH_REQUIRE(it != running_.end(), InvalidArgument,
                   "trial {} was not running at rung {}: nothing to report", trial, rung);
  BIGBATCH_REQUIRE(std::isfinite(metric), InvalidArgument,
                   "trial {} rung {}: the metric {} is not finite (report fail() instead)", trial,
                   rung, metric);
  running_.erase(it);
  done_[rung].push_back({trial, metric, false});
}

void AshaScheduler::fail(int trial, int rung) {
  auto it = std::find(running_.begin(), running_.end(), std::make_pair(trial, rung));
  BIGBATCH_REQUIRE(it != running_.end(), InvalidArgument,
                   "trial {} was not running at rung {}: nothing failed", trial, rung);
  running_.erase(it);
}

bool AshaScheduler::finished() const {
  if (!running_.empty()) return false;
  AshaScheduler copy = *this;
  return !copy.next().has_value();
}

std::optional<double> AshaScheduler::metric(int trial, int rung) const {
  if (rung < 0 || rung >= rungs()) return std::nullopt;
  for (const Entry& e : done_[rung]) {
    if (e.trial == trial) return e.metric;
  }
  return std::nullopt;
}

std::optional<int> AshaScheduler::best() const {
  for (int k = rungs() - 1; k >= 0; --k) {
    const Entry* top = nullptr;
    for (const Entry& e : done_[k]) {
      if (!top || better(e.metric, top->metric) ||
          (e.metric == top->metric && e.trial < top->trial)) {
        top = &e;
      }
    }
    if (top) return top->trial;
  }
  return std::nullopt;
}

}  // namespace bigbatch
