#include "device_codec.h"

#include <ATen/ScalarOps.h>

#include "bigbatch/common/error.h"
#include "device_powersgd_codec.h"

namespace bigbatch::ddp_detail {
namespace {

torch::ScalarType torchType(DataType t) {
  switch (t) {
    case DataType::kFloat16: return torch::kFloat16;
    case DataType::kBFloat16: return torch::kBFloat16;
    default: return torch::kFloat32;
  }
}

// The gradients as they are (fp32), or cast to 16 bits on the device.
class DeviceCastCodec : public DeviceCodec {
 public:
  DeviceCastCodec(DataType wireType, int worldSize) : type_(wireType), worldSize_(worldSize) {}
  DataType wireType() const override { return type_; }
  void exchange(size_t, const Bucket&, const torch::Tensor& values, DeviceWireSum& wire) override {
    sumAsWireType(values, type_, worldSize_, scratch_, wire);
  }

 private:
  DataType type_;
  int worldSize_;
  // One 16-bit buffer for every bucket: the buckets' casts are ordered on
  // the one stream they are enqueued on.
  torch::Tensor scratch_;
};

}  // namespace

void sumAsWireType(const torch::Tensor& values, DataType wireType, int worldSize,
                   torch::Tensor& scratch, DeviceWireSum& wire) {
  torch::NoGradGuard noGrad;
  if (wireType == DataType::kFloat32) {
    wire.sum(values);
    return;
  }
  const int64_t n = values.numel();
  if (!scratch.defined() || scratch.numel() < n || scratch.device() != values.device())
    scratch = torch::empty({n}, values.options().dtype(torchType(wireType)));
  torch::Tensor onWire = scratch.narrow(0, 0, n);
  // values·(1/n) computed in fp32 and rounded once, straight into the wire
  // buffer (no temporary): the host path's pack, bit for bit.
  at::mul_out(onWire, values,
              at::native::wrapped_scalar_tensor(1.0 / static_cast<double>(worldSize)));
  wire.sum(onWire);
  values.copy_(onWire);
  values.mul_(static_cast<double>(worldSize));
}

std::unique_ptr<DeviceCodec> makeDeviceCodec(const DdpOptions& options,
                                             const std::vector<torch::Tensor>& params,
                                             const std::vector<std::string>& names,
                                             int worldSize, torch::Device device) {
  const DataType wireType = options.exchangeType;
  BIGBATCH_REQUIRE(wireType == DataType::kFloat32 || wireType == DataType::kFloat16 ||
                       wireType == DataType::kBFloat16,
                   InvalidArgument,
                   "gradient exchange type {} must be float32, float16 or bfloat16",
                   dataTypeName(wireType));
  if (options.compression == GradientCompression::kPowerSgd) {
    return std::make_unique<DevicePowerSgdCodec>(options.powerSgd, wireType, params, names,
                                                 worldSize, device);
  }
  return std::make_unique<DeviceCastCodec>(wireType, worldSize);
}

}  // namespace bigbatch::ddp_detail
