// NcclReducer: the gradient buckets of a model on a GPU summed by NCCL on
// the device as backward produces them — no host copy, no host thread
// (nccl_exchange.h has the streams and events). The host codecs work on
// host memory; this transport takes a device codec (device_codec.h).
//
// Threading: as BucketReducer (ready() on the autograd device thread).
// Internal to src/ddp.
#pragma once

#include "bigbatch/ddp/job_collectives.h"
#include "bucket_reducer.h"
#include "gradient_buckets.h"
#include "nccl_exchange.h"

namespace bigbatch::ddp_detail {

class NcclReducer : public BucketReducer {
 public:
  NcclReducer(JobCollectives& job, GradientBuckets& buckets, NcclCommunicator& nccl,
              c10::Stream stream, DeviceCodec& codec)
      : job_(job), buckets_(buckets),
        exchange_(nccl, stream, buckets.buffers(), buckets.layout(), codec) {}
  void ready(size_t bucket) override { exchange_.ready(bucket); }
  double finish(size_t first) override {
    const auto t0 = std::chrono::steady_clock::now();
    job_.thread().waitAll();  // nothing of the exchange's, but the job's tasks come first
    for (size_t b = first; b < buckets_.layout().size(); ++b) exchange_.ready(b);
    exchange_.finish(job_.watchdog());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  JobCollectives& job_;
  GradientBuckets& buckets_;
  NcclExchange exchange_;
};

}  // namespace bigbatch::ddp_detail
