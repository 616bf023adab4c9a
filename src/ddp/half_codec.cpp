#include "half_codec.h"

#include "bigbatch/collectives/allreduce.h"

namespace bigbatch::ddp_detail {

HalfCodec::HalfCodec(DataType wireType, int worldSize, BucketResult result)
    : type_(wireType), worldSize_(worldSize), result_(result) {}

void HalfCodec::exchange(size_t index, const Bucket& bucket, float* data, WireSum& wire) {
  const auto count = static_cast<size_t>(bucket.numel);
  if (wire_.size() <= index) wire_.resize(index + 1);
  std::vector<uint8_t>& bytes = wire_[index];
  const size_t width = elementSize(type_);
  bytes.resize(count * width);
  packFloats(type_, bytes.data(), data, count, 1.0f / static_cast<float>(worldSize_));
  wire.sum(bytes.data(), count, type_);
  // Only the range this rank holds the sum of is unpacked.
  const auto [lo, hi] = wire.kept(count);
  unpackFloats(type_, data + lo, bytes.data() + lo * width, hi - lo,
               result_ == BucketResult::kMean ? 1.0f : static_cast<float>(worldSize_));
}

}  // namespace bigbatch::ddp_detail
