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
// `elementBytes` the size of one gradient element in the exchange;
// `alignElements`: every entry's offset is a multiple of it, the gaps
// between entries left in the bucket (counted in its numel and sent with
// it, never written: zero in a zeroed buffer).
//
// The DDP's buckets use kParameterAlignElements: each gradient view — and
// under the partitioned exchange each parameter, re-pointed into its
// bucket — starts 64-byte aligned, as a fresh allocation does. cuDNN's
// vectorised kernels fault on a weight that is not 16-byte aligned (seen on
// an H200: its NHWC BatchNorm forward, "misaligned address", with the
// partitioned exchange's packed layout). One layout whether partitioned or
// not, so the two sum the same elements in the same chunks (the partition
// equivalence check's SGD is bit-identical); the gaps cost at most 60
// bytes a tensor.
inline constexpr int64_t kParameterAlignElements = 16;
std::vector<Bucket> layoutBuckets(const std::vector<int64_t>& numels, size_t fusionBytes,
                                  size_t elementBytes = 4, int64_t alignElements = 1);

}  // namespace bigbatch
