// StagedReducer: buckets in device memory summed by the host collectives
// through pinned host mirrors (device_staging.h) — the path when NCCL is
// absent, ranks share a GPU, or the optimizer is partitioned through the
// host (ZeRO-Offload's split). Per bucket: its final point marked on the
// compute stream (handOff), device -> host on the copy stream, the codec
// and the collective on the mirror, then `afterSum`: by default the sum
// back to the device (host -> device); a partitioned exchange instead
// keeps it in the mirror and brings this rank's weight chunk up beside it.
// DdpOptions::stageThroughHost runs this path on CPU buckets, for tests.
//
// Threading: as HostReducer. Internal to src/ddp.
#pragma once

#include <functional>

#include "device_staging.h"
#include "host_reducer.h"

namespace bigbatch::ddp_detail {

class StagedReducer : public HostReducer {
 public:
  // `staging`: the mirrors of `buckets`' buffers. `afterSum`: what follows
  // a bucket's sum (null: staging.toDevice(b)).
  StagedReducer(JobCollectives& job, GradientBuckets& buckets, GradientCodec& codec, WireSum& wire,
                ExchangeObserver onExchange, DeviceStaging& staging,
                std::function<void(size_t)> afterSum = nullptr);

 protected:
  void handOff(size_t b) override { staging_.ready(b); }
  float* hostValues(size_t b) override { return staging_.toHost(b); }
  void afterSum(size_t b) override;

 private:
  DeviceStaging& staging_;
  std::function<void(size_t)> afterSum_;
};

}  // namespace bigbatch::ddp_detail
