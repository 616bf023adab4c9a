#include "staged_reducer.h"

namespace bigbatch::ddp_detail {

StagedReducer::StagedReducer(JobCollectives& job, GradientBuckets& buckets, GradientCodec& codec,
                             WireSum& wire, ExchangeObserver onExchange, DeviceStaging& staging,
                             std::function<void(size_t)> afterSum)
    : HostReducer(job, buckets, codec, wire, std::move(onExchange)), staging_(staging),
      afterSum_(std::move(afterSum)) {}

void StagedReducer::afterSum(size_t b) {
  if (afterSum_) {
    afterSum_(b);
  } else {
    staging_.toDevice(b);
  }
}

}  // namespace bigbatch::ddp_detail
