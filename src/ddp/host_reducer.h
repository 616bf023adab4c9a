// HostReducer: buckets in host memory summed by the host collectives
// (ddp.allreduce: MPI, shared memory, the tuned algorithms) on the
// communication thread, while backward goes on (Goyal et al. 2017).
//
// ready(b) queues b's exchange on the thread; finish() waits for the queue
// to drain and then exchanges the rest on the compute thread — the last
// bucket fills at the very end of backward, when there is nothing left to
// overlap it with, so reducing it inline saves two thread hand-offs per
// step — in order, once the thread is idle: MPI is entered by one thread at
// a time. StagedReducer reuses all of it through the three steps a bucket
// takes: handOff(), hostValues(), afterSum().
//
// Threading: as BucketReducer; the exchange itself runs on the
// communication thread, or inline in finish(). Internal to src/ddp.
#pragma once

#include "bigbatch/ddp/job_collectives.h"
#include "bucket_reducer.h"
#include "gradient_buckets.h"
#include "gradient_codec.h"

namespace bigbatch::ddp_detail {

class HostReducer : public BucketReducer {
 public:
  HostReducer(JobCollectives& job, GradientBuckets& buckets, GradientCodec& codec, WireSum& wire,
              ExchangeObserver onExchange);
  void ready(size_t bucket) override;
  double finish(size_t first) override;

 protected:
  GradientBuckets& buckets() { return buckets_; }
  // Bucket b is final on the compute side; called before its exchange is queued or run.
  virtual void handOff(size_t) {}
  // Where the collectives find bucket b's values (on the exchanging thread).
  virtual float* hostValues(size_t b);
  // After b's sum, on the exchanging thread.
  virtual void afterSum(size_t) {}

 private:
  void exchange(size_t bucket, bool onComputeThread);

  JobCollectives& job_;
  GradientBuckets& buckets_;
  GradientCodec& codec_;
  WireSum& wire_;
  ExchangeObserver onExchange_;
};

}  // namespace bigbatch::ddp_detail
