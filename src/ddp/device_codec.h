// DeviceCodec: how one bucket of fp32 gradients in GPU memory travels
// between the ranks on the device — the NCCL exchange's codec, as
// GradientCodec (gradient_codec.h) is the host transports'. Its work is
// ATen ops enqueued on the current stream (the exchange makes that NCCL's
// stream), and it never waits on the host for the device: a step's
// exchange is enqueued while backward goes on, and only the exchange's
// finish() waits. Two implementations: the cast to the wire type (below:
// fp32 as it is, fp16/bf16 pre-divided by the world size, the host
// HalfCodec's rounding bit for bit) and PowerSGD (device_powersgd_codec.h).
// The ops are ATen's, so a codec also runs on CPU tensors: the tests check
// it against the host codecs on CPU ranks.
//
// Threading: exchange() on the thread that enqueues the exchange (the
// autograd device thread, or the compute thread in finish()) — one bucket
// at a time, in bucket order; state() and loadState() while no exchange is
// in flight. Internal to src/ddp.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "gradient_codec.h"

namespace bigbatch::ddp_detail {

// The device transport's collective as a codec sees it.
class DeviceWireSum {
 public:
  virtual ~DeviceWireSum() = default;
  // Sums the contiguous tensor `values` (fp32, fp16 or bf16) across the
  // ranks, in place, in the current stream's order.
  virtual void sum(const torch::Tensor& values) = 0;
};

class DeviceCodec : public BucketCodec {
 public:
  // Sums bucket number `index` — `bucket` says which parameters lie where
  // in it; `values` is its flat fp32 tensor — across the ranks through
  // `wire`. Every rank ends with the same bits.
  virtual void exchange(size_t index, const Bucket& bucket, const torch::Tensor& values,
                        DeviceWireSum& wire) = 0;
};

// Sums the flat fp32 tensor `values` in `wireType` through `wire`: in
// place for fp32; for fp16/bf16 values·(1/n) rounded once into `scratch`
// (resized as needed), summed, and scaled back by n into `values` — the
// host path's pack and unpack, bit for bit.
void sumAsWireType(const torch::Tensor& values, DataType wireType, int worldSize,
                   torch::Tensor& scratch, DeviceWireSum& wire);

// The device codec for `options` (exchangeType, compression, powerSgd);
// `params` and `names` as for makeGradientCodec, `device` where the
// buckets are. Refuses what cannot work, naming the option.
std::unique_ptr<DeviceCodec> makeDeviceCodec(const DdpOptions& options,
                                             const std::vector<torch::Tensor>& params,
                                             const std::vector<std::string>& names,
                                             int worldSize, torch::Device device);

}  // namespace bigbatch::ddp_detail
