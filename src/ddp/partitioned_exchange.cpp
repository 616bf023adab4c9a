#include "partitioned_exchange.h"

#include <algorithm>

#include "bigbatch/collectives/collectives.h"
#include "bigbatch/common/error.h"

namespace bigbatch::ddp_detail {

PartitionedExchange::PartitionedExchange(JobCollectives& job, GradientBuckets& buckets,
                                         DeviceStaging* gradientStaging,
                                         ExchangeObserver onExchange)
    : job_(job), buckets_(buckets), onExchange_(std::move(onExchange)) {
  torch::NoGradGuard noGrad;
  const std::vector<Bucket>& layout = buckets_.layout();
  for (size_t b = 0; b < layout.size(); ++b) {
    // Zeros: the gaps between aligned entries (bucket_layout.h) are sent too.
    weights_.push_back(torch::zeros({layout[b].numel}, buckets_.params().front().options()));
    for (const auto& e : layout[b].entries) {
      torch::Tensor p = buckets_.params()[e.param];
      torch::Tensor w = shapedLike(weights_[b].narrow(0, e.offset, e.numel), p);
      w.copy_(p);
      p.set_data(w);
    }
  }
  if (gradientStaging) {
    weightStaging_ = std::make_unique<DeviceStaging>(weights_, gradientStaging);
    // The weights were just copied in on the compute stream: the first
    // read of them on the copy stream waits for that.
    for (size_t b = 0; b < weights_.size(); ++b) weightStaging_->ready(b);
  }
  makeShards(gradientStaging);
}

void PartitionedExchange::makeShards(DeviceStaging* gradientStaging) {
  const std::vector<Bucket>& layout = buckets_.layout();
  const int rank = job_.rank(), size = job_.size();
  for (size_t b = 0; b < layout.size(); ++b) {
    const int64_t n = layout[b].numel;
    const auto lo = static_cast<int64_t>(chunkBegin(static_cast<size_t>(n), size, rank));
    const auto hi = static_cast<int64_t>(chunkBegin(static_cast<size_t>(n), size, rank + 1));
    // Staged: the slices are views into the host mirrors (the optimizer
    // runs on the host); otherwise into the model's own storage.
    const torch::Tensor& weights = weightStaging_ ? weightStaging_->host(b) : weights_[b];
    const torch::Tensor& grads = gradientStaging ? gradientStaging->host(b) : buckets_.buffers()[b];
    for (const auto& e : layout[b].entries) {
      const int64_t s = std::max(lo, e.offset), t = std::min(hi, e.offset + e.numel);
      if (s >= t) continue;
      const torch::Tensor& p = buckets_.params()[e.param];
      shards_.push_back({e.param, buckets_.names()[e.param], p.dim(), s - e.offset, t - s,
                         weights.narrow(0, s, t - s), grads.narrow(0, s, t - s), p});
    }
  }
}

void PartitionedExchange::weightsToHost(size_t b) {
  const auto n = static_cast<size_t>(weights_[b].numel());
  weightStaging_->toHost(b, static_cast<int64_t>(chunkBegin(n, job_.size(), job_.rank())),
                         static_cast<int64_t>(chunkBegin(n, job_.size(), job_.rank() + 1)));
}

void PartitionedExchange::gatherWeights() {
  // The last bucket holds the first layers, which the next forward needs first.
  for (size_t b = weights_.size(); b-- > 0;) {
    // Staged: what the compute stream queued so far (reads of the old
    // weights) comes before the new weights are copied over them.
    if (weightStaging_) weightStaging_->ready(b);
    gatherTicket_ = job_.thread().submit([this, b] {
      StallWatchdog::Scope watched(job_.watchdog(), StallWatchdog::kCommThread,
                                   "the weight all-gather");
      const auto start = std::chrono::steady_clock::now();
      float* weights = weightStaging_ ? weightStaging_->host(b).data_ptr<float>()
                                      : weights_[b].data_ptr<float>();
      allgather(job_.communicator(), weights, static_cast<size_t>(weights_[b].numel()),
                DataType::kFloat32, /*checkSignature=*/false);
      if (weightStaging_) weightStaging_->toDevice(b);
      if (onExchange_) {
        onExchange_(b, static_cast<size_t>(weights_[b].numel()) * sizeof(float), start,
                    std::chrono::steady_clock::now(), false);
      }
    });
  }
}

double PartitionedExchange::waitWeights() {
  if (gatherTicket_ == 0) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t ticket = gatherTicket_;
  gatherTicket_ = 0;
  job_.thread().waitFor(ticket);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<torch::Tensor> PartitionedExchange::gatherShards(const std::vector<torch::Tensor>& mine) {
  BIGBATCH_REQUIRE(mine.size() == shards_.size(), InvalidArgument,
                   "gatherShards: {} slices given, this rank holds {}", mine.size(),
                   shards_.size());
  waitWeights();
  torch::NoGradGuard noGrad;
  const std::vector<Bucket>& layout = buckets_.layout();
  std::vector<torch::Tensor> flats;
  for (const auto& b : layout) flats.push_back(torch::zeros({b.numel}, torch::kFloat32));
  for (size_t i = 0; i < shards_.size(); ++i) {
    const ParameterShard& s = shards_[i];
    BIGBATCH_REQUIRE(mine[i].numel() == s.numel, InvalidArgument,
                     "gatherShards: slice of '{}' has {} values, the shard {}", s.name,
                     mine[i].numel(), s.numel);
    const size_t b = buckets_.bucketOf(s.param);
    const BucketEntry* entry = nullptr;
    for (const auto& e : layout[b].entries) {
      if (e.param == s.param) entry = &e;
    }
    flats[b].narrow(0, entry->offset + s.begin, s.numel).copy_(mine[i].reshape({-1}));
  }
  job_.runWatched("the optimizer-state all-gather", [&] {
    for (auto& f : flats) {
      allgather(job_.communicator(), f.data_ptr<float>(), static_cast<size_t>(f.numel()),
                DataType::kFloat32);
    }
  });
  std::vector<torch::Tensor> whole(buckets_.params().size());
  for (size_t b = 0; b < layout.size(); ++b) {
    for (const auto& e : layout[b].entries) {
      whole[e.param] = shapedLike(flats[b].narrow(0, e.offset, e.numel), buckets_.params()[e.param]);
    }
  }
  return whole;
}

}  // namespace bigbatch::ddp_detail
