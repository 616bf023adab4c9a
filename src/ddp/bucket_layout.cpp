#include "bigbatch/ddp/bucket_layout.h"

namespace bigbatch {

std::vector<Bucket> layoutBuckets(const std::vector<int64_t>& numels, size_t fusionBytes,
                                  size_t elementBytes, int64_t alignElements) {
  const auto aligned = [alignElements](int64_t offset) {
    return (offset + alignElements - 1) / alignElements * alignElements;
  };
  std::vector<Bucket> buckets;
  Bucket current;
  for (size_t k = numels.size(); k-- > 0;) {
    const int64_t n = numels[k];
    const size_t bytesIfAdded = static_cast<size_t>(aligned(current.numel) + n) * elementBytes;
    if (!current.entries.empty() && bytesIfAdded > fusionBytes) {
      buckets.push_back(std::move(current));
      current = Bucket{};
    }
    const int64_t offset = aligned(current.numel);
    current.entries.push_back({k, offset, n});
    current.numel = offset + n;
  }
  if (!current.entries.empty()) buckets.push_back(std::move(current));
  return buckets;
}

}  // namespace bigbatch
