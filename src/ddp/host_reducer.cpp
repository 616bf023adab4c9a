#include "host_reducer.h"

#include "bigbatch/ddp/stall_watchdog.h"

namespace bigbatch::ddp_detail {

HostReducer::HostReducer(JobCollectives& job, GradientBuckets& buckets, GradientCodec& codec,
                         WireSum& wire, ExchangeObserver onExchange)
    : job_(job), buckets_(buckets), codec_(codec), wire_(wire), onExchange_(std::move(onExchange)) {}

void HostReducer::ready(size_t bucket) {
  handOff(bucket);
  job_.thread().submit([this, bucket] { exchange(bucket, false); });
}

double HostReducer::finish(size_t first) {
  const auto t0 = std::chrono::steady_clock::now();
  job_.thread().waitAll();
  for (size_t b = first; b < buckets_.layout().size(); ++b) {
    handOff(b);
    exchange(b, true);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

float* HostReducer::hostValues(size_t b) { return buckets_.buffers()[b].data_ptr<float>(); }

void HostReducer::exchange(size_t bucket, bool onComputeThread) {
  StallWatchdog::Scope watched(
      job_.watchdog(), onComputeThread ? StallWatchdog::kComputeThread : StallWatchdog::kCommThread,
      wire_.operation());
  const auto start = std::chrono::steady_clock::now();
  const Bucket& entries = buckets_.layout()[bucket];
  codec_.exchange(bucket, entries, hostValues(bucket), wire_);
  afterSum(bucket);
  if (onExchange_) {
    onExchange_(bucket, static_cast<size_t>(codec_.wireBytes(entries)), start,
                std::chrono::steady_clock::now(), onComputeThread);
  }
}

}  // namespace bigbatch::ddp_detail
