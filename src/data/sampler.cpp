#include "bigbatch/data/sampler.h"

#include <algorithm>
#include <numeric>

#include "bigbatch/common/error.h"

namespace bigbatch {

std::vector<int64_t> epochPermutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  // Fisher-Yates with a splitmix64 stream: identical on every platform, unlike
  // std::shuffle whose algorithm is implementation-defined.
  uint64_t state = mixSeed(seed, 0x5eed0fe90c0ULL, static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    state = splitmix64(state);
    int64_t j = static_cast<int64_t>(state % static_cast<uint64_t>(i + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

ShardPlan planEpoch(int64_t datasetSize, int64_t globalBatch, int rank, int worldSize,
                    uint64_t seed, int64_t epoch, bool shuffle) {
  BIGBATCH_REQUIRE(globalBatch >= worldSize, InvalidArgument,
                   "global batch {} is smaller than the {} ranks; raise train.batch_size",
                   globalBatch, worldSize);
  BIGBATCH_REQUIRE(datasetSize > 0, InvalidArgument, "dataset is empty");
  std::vector<int64_t> order;
  if (shuffle) {
    order = epochPermutation(datasetSize, seed, epoch);
  } else {
    order.resize(datasetSize);
    std::iota(order.begin(), order.end(), 0);
  }
  ShardPlan plan;
  plan.steps = (datasetSize + globalBatch - 1) / globalBatch;
  plan.batches.reserve(plan.steps);
  for (int64_t s = 0; s < plan.steps; ++s) {
    const int64_t begin = s * globalBatch;
    const int64_t m = std::min(globalBatch, datasetSize - begin);
    const int64_t lo = begin + m * rank / worldSize;
    const int64_t hi = begin + m * (rank + 1) / worldSize;
    plan.batches.emplace_back(order.begin() + lo, order.begin() + hi);
  }
  return plan;
}

}  // namespace bigbatch
