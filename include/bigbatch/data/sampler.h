// Which samples each rank trains on in each step of an epoch.
//
// The order of an epoch is a permutation drawn from (seed, epoch) alone, so
// every rank computes the same one without communicating. The permutation is
// cut into global batches of `globalBatch` samples; the last one is smaller
// when the dataset is not divisible by the global batch (no sample is dropped
// or repeated). Each global batch is split into `worldSize` contiguous shards
// whose sizes differ by at most one, rank r taking shard r. Every sample is
// thus seen exactly once per epoch across all ranks. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

namespace bigbatch {

struct ShardPlan {
  int64_t steps = 0;                          // global batches in the epoch (same on every rank)
  std::vector<std::vector<int64_t>> batches;  // this rank's sample indices, one entry per step
};

// A permutation of 0..n-1 that depends only on (seed, epoch).
std::vector<int64_t> epochPermutation(int64_t n, uint64_t seed, int64_t epoch);

ShardPlan planEpoch(int64_t datasetSize, int64_t globalBatch, int rank, int worldSize,
                    uint64_t seed, int64_t epoch, bool shuffle = true);

// splitmix64 (Steele et al. 2014): a fast, well-mixed 64-bit hash used to derive
// independent random streams from (seed, epoch, index).
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline uint64_t mixSeed(uint64_t seed, uint64_t a, uint64_t b = 0) {
  return splitmix64(splitmix64(splitmix64(seed) ^ a) ^ b);
}

}  // namespace bigbatch
