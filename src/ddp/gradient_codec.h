// GradientCodec: how one bucket's fp32 gradients travel between the ranks —
// encode, the transport's collective, decode — the stage PyTorch's DDP
// calls a communication hook (torch.distributed.algorithms.ddp_comm_hooks).
//
// A codec is handed the bucket's values on the host and a WireSum: the
// transport's collective (the allreduce, or under a partitioned optimizer
// the reduce-scatter), which sums a buffer of any wire type across ranks in
// place. It calls the collective as often as it needs — once for a cast to
// 16 bits, twice for PowerSGD's P and Q — and leaves the summed (or, as
// made, the averaged: BucketResult) gradient in the range of the bucket
// that WireSum::kept() names (all of it for an allreduce; this rank's
// chunk for a reduce-scatter). Every rank must end
// with bit-identical values there: the weights stay identical without a
// broadcast. A new way to exchange a bucket is one new codec file plus its
// case in makeGradientCodec().
//
// Threading: exchange() runs on whichever thread holds the communicator
// (the communication thread, or the compute thread for the bucket reduced
// inline) — one bucket at a time, so a codec's per-bucket buffers need no
// lock. Internal to src/ddp.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/comm/communicator.h"
#include "bigbatch/ddp/bucket_layout.h"
#include "bigbatch/ddp/distributed_data_parallel.h"

namespace bigbatch::ddp_detail {

// What a codec leaves in the bucket: the sum over the ranks (bigbatch's own
// reducers: the optimizer's step takes the 1/N), or their mean (a DDP comm
// hook: DDP hands its hook's result to the optimizer as the gradient, as
// PyTorch's own hooks give it). Where the codec writes the bucket anyway —
// the 16-bit wire's widening (the pre-divided sum is the mean), PowerSGD's
// P Q^T — the mean costs no pass of its own; a division after the sum was
// another read and write of all 105 MB of the 26 M-parameter model's
// gradients a step. An fp32 wire (and PowerSGD's uncompressed fp32 values)
// still divides after the sum.
enum class BucketResult { kSum, kMean };

// The transport's collective as a codec sees it.
class WireSum {
 public:
  virtual ~WireSum() = default;
  // Sums `count` elements of `type` at `data` across the ranks, in place.
  virtual void sum(void* data, size_t count, DataType type) = 0;
  // The same sum, `data` filled and its kept range drained through `stages`
  // (allreduce.h): piece by piece where the collective runs in pieces, so a
  // codec's packing overlaps the wire. Here: fill all, sum, drain kept().
  virtual void sumStaged(void* data, size_t count, DataType type, AllreduceStages& stages);
  // The elements [first, second) of a `count`-element sum this rank holds
  // afterwards.
  virtual std::pair<size_t, size_t> kept(size_t count) const = 0;
  // For the stall watchdog: "the gradient allreduce", ...
  virtual const char* operation() const = 0;
};

// What every codec is, whichever memory its exchange runs in: the host
// codecs here (GradientCodec) and those on a GPU stream (DeviceCodec,
// device_codec.h).
class BucketCodec {
 public:
  using NamedState = DistributedDataParallel::NamedState;
  virtual ~BucketCodec() = default;
  // The element type on the wire (the layout check).
  virtual DataType wireType() const = 0;
  // Bytes a rank hands to the collectives for this bucket per step.
  virtual int64_t wireBytes(const Bucket& bucket) const;
  // State a checkpoint carries (a stateful codec's), and its restore.
  virtual NamedState state() const { return {}; }
  virtual void loadState(const NamedState&) {}
  // The gradients to come are `factor` times the scale of the last ones
  // (the loss scale grew or backed off): a codec that remembers past
  // gradients (PowerSGD's error feedback) brings its memory to the new
  // scale, so old and new add as the same quantity. Between steps only.
  virtual void rescale(double /*factor*/) {}
};

class GradientCodec : public BucketCodec {
 public:
  // Sums bucket number `index` — `bucket` says which parameters lie where
  // in it — whose bucket.numel gradients are at `data`, across the ranks
  // through `wire` (see above); leaves the sum or the mean, as the codec
  // was made (BucketResult).
  virtual void exchange(size_t index, const Bucket& bucket, float* data, WireSum& wire) = 0;
};

// The codec for `options` (exchangeType, compression, powerSgd): kFloat32
// sends the gradients as they are; kFloat16 / kBFloat16 cast them to 16
// bits (half_codec.h); PowerSGD compresses them, its factors in the exchange
// type (powersgd_codec.h).
// `params`: the exchanged parameters in registration order (their shapes
// and names), `worldSize`: the ranks summing, `result`: what the bucket
// holds afterwards. Refuses what cannot work, naming the option.
std::unique_ptr<GradientCodec> makeGradientCodec(const DdpOptions& options,
                                                 const std::vector<torch::Tensor>& params,
                                                 const std::vector<std::string>& names,
                                                 int worldSize,
                                                 BucketResult result = BucketResult::kSum);

// Divides the `count` floats at `data` by `worldSize` (a mean from a sum).
void divideBy(float* data, size_t count, int worldSize);

}  // namespace bigbatch::ddp_detail
