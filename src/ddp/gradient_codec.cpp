#include "gradient_codec.h"

#include "bigbatch/common/error.h"
#include "half_codec.h"

namespace bigbatch::ddp_detail {
namespace {

// fp32 on the wire: the gradients as they are, summed in place.
class Float32Codec : public GradientCodec {
 public:
  DataType wireType() const override { return DataType::kFloat32; }
  void exchange(size_t, float* data, size_t count, WireSum& wire) override {
    wire.sum(data, count, DataType::kFloat32);
  }
};

}  // namespace

std::unique_ptr<GradientCodec> makeGradientCodec(DataType wireType, int worldSize) {
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
