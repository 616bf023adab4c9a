#include "gradient_codec.h"

#include "bigbatch/common/error.h"
#include "half_codec.h"
#include "powersgd_codec.h"

namespace bigbatch::ddp_detail {
namespace {

// fp32 on the wire: the gradients as they are, summed in place.
class Float32Codec : public GradientCodec {
 public:
  DataType wireType() const override { return DataType::kFloat32; }
  void exchange(size_t, const Bucket& bucket, float* data, WireSum& wire) override {
    wire.sum(data, static_cast<size_t>(bucket.numel), DataType::kFloat32);
  }
};

}  // namespace

int64_t BucketCodec::wireBytes(const Bucket& bucket) const {
  return bucket.numel * static_cast<int64_t>(elementSize(wireType()));
}

std::unique_ptr<GradientCodec> makeGradientCodec(const DdpOptions& options,
                                                 const std::vector<torch::Tensor>& params,
                                                 const std::vector<std::string>& names,
                                                 int worldSize) {
  const DataType wireType = options.exchangeType;
  if (options.compression == GradientCompression::kPowerSgd)
    return std::make_unique<PowerSgdCodec>(options.powerSgd, wireType, params, names, worldSize);
  switch (wireType) {
    case DataType::kFloat32:
      return std::make_unique<Float32Codec>();
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return std::make_unique<HalfCodec>(wireType, worldSize);
    default:
      BIGBATCH_THROW(InvalidArgument,
                     "gradient exchange type {} must be float32, float16 or bfloat16",
                     dataTypeName(wireType));
  }
}

}  // namespace bigbatch::ddp_detail
