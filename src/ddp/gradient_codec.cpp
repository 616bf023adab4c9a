#include "gradient_codec.h"

#include "bigbatch/common/error.h"
#include "half_codec.h"
#include "powersgd_codec.h"

namespace bigbatch::ddp_detail {
namespace {

// fp32 on the wire: the gradients as they are, summed in place.
class Float32Codec : public GradientCodec {
 public:
  Float32Codec(int worldSize, BucketResult result) : worldSize_(worldSize), result_(result) {}
  DataType wireType() const override { return DataType::kFloat32; }
  void exchange(size_t, const Bucket& bucket, float* data, WireSum& wire) override {
    const auto count = static_cast<size_t>(bucket.numel);
    wire.sum(data, count, DataType::kFloat32);
    if (result_ == BucketResult::kMean) {
      const auto [lo, hi] = wire.kept(count);
      divideBy(data + lo, hi - lo, worldSize_);
    }
  }

 private:
  int worldSize_;
  BucketResult result_;
};

}  // namespace

void divideBy(float* data, size_t count, int worldSize) {
  // A division, not a multiplication by 1/N: the bits of PyTorch's
  // `bucket.div_(world_size)` for any N.
  const auto n = static_cast<float>(worldSize);
  for (size_t i = 0; i < count; ++i) data[i] /= n;
}

void WireSum::sumStaged(void* data, size_t count, DataType type, AllreduceStages& stages) {
  stages.fill(0, count);
  sum(data, count, type);
  const auto [lo, hi] = kept(count);
  stages.drain(lo, hi);
}

int64_t BucketCodec::wireBytes(const Bucket& bucket) const {
  return bucket.numel * static_cast<int64_t>(elementSize(wireType()));
}

std::unique_ptr<GradientCodec> makeGradientCodec(const DdpOptions& options,
                                                 const std::vector<torch::Tensor>& params,
                                                 const std::vector<std::string>& names,
                                                 int worldSize, BucketResult result) {
  const DataType wireType = options.exchangeType;
  if (options.compression == GradientCompression::kPowerSgd)
    return std::make_unique<PowerSgdCodec>(options.powerSgd, wireType, params, names, worldSize,
                                           result);
  switch (wireType) {
    case DataType::kFloat32:
      return std::make_unique<Float32Codec>(worldSize, result);
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return std::make_unique<HalfCodec>(wireType, worldSize, result);
    default:
      BIGBATCH_THROW(InvalidArgument,
                     "gradient exchange type {} must be float32, float16 or bfloat16",
                     dataTypeName(wireType));
  }
}

}  // namespace bigbatch::ddp_detail
