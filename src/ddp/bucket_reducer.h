// BucketReducer: one way of moving complete gradient buckets between the
// ranks while backward goes on — the transport. Three implementations:
//   HostReducer    (host_reducer.h)    the host collectives on the
//                                       communication thread (CPU buckets);
//   StagedReducer  (staged_reducer.h)  the same through pinned host mirrors
//                                       of buckets in device memory;
//   NcclReducer    (nccl_reducer.h)    NCCL on a stream of the GPU.
// What a bucket looks like on the wire is the codec's, not the
// transport's: the host transports take any host codec (gradient_codec.h),
// NCCL any device codec (device_codec.h).
//
// Threading: ready() is called on the thread that runs backward, in bucket
// order, for every bucket but those left to finish(); finish() on the
// compute thread after the synced backward. Internal to src/ddp.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

namespace bigbatch::ddp_detail {

// Called after each bucket's exchange, on the thread that ran it (for the
// timeline): the bucket, its bytes on the wire, when it ran, and whether
// that was the compute thread (the bucket reduced inline).
using ExchangeObserver =
    std::function<void(size_t bucket, size_t bytes, std::chrono::steady_clock::time_point start,
                       std::chrono::steady_clock::time_point end, bool onComputeThread)>;

class BucketReducer {
 public:
  virtual ~BucketReducer() = default;
  // Bucket `bucket`'s gradients are final: its exchange may start.
  virtual void ready(size_t bucket) = 0;
  // Exchanges the buckets from `first` on (never handed to ready()) and
  // waits for every exchange of this step. Returns the seconds it took —
  // the communication backward did not hide.
  virtual double finish(size_t first) = 0;
};

}  // namespace bigbatch::ddp_detail
