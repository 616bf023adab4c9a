// How gradients are packed into flat buckets for the exchange.
//
// Parameters are taken in reverse registration order — roughly the order in
// which backward produces their gradients — and packed greedily into buckets
// of at most `fusionBytes` (a tensor larger than that gets a bucket of its
// own). The layout depends only on the parameter shapes and fusionBytes, so
// it is identical on every rank without communication (the DDP engine still
// verifies that once). Pure; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bigbatch {

struct BucketEntry {
  size_t param;    // index into the registration-ordered parameter list
  int64_t offset;  // first element inside the bucket
  int64_t numel;
};

struct Bucket {
  std::vector<BucketEntry> entries;
  int64_t numel = 0;
};

// `numels[i]` is the element count of parameter i (registration order);
// `elementBytes` the size of one gradient element in the exchange.
std::vector<Bucket> layoutBuckets(const std::vector<int64_t>& numels, size_t fusionBytes,
                                  size_t elementBytes = 4);

}  // namespace bigbatch
