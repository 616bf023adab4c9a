// PartitionedExchange: the weights' side of a partitioned optimizer (ZeRO
// stage 1, Rajbhandari et al. 2020; DdpOptions::partition).
//
// Each bucket's gradients are reduce-scattered (ReduceScatterWire), so rank
// c holds the summed gradient of its chunk c of every bucket and updates
// only that slice of the weights; gatherWeights() then all-gathers every
// bucket's updated weights (the other half of a ring allreduce, the same
// bytes). For that every parameter is re-pointed (set_data) into a flat
// weight buffer per bucket, so the optimizer's slices and the all-gather
// touch the model's own storage and nothing is copied. The gathers run on
// the communication thread while the compute thread goes on to the next
// step's data; waitWeights() waits for them. 1/N of the optimizer's memory
// traffic and state.
//
// Staged (buckets in device memory): the slices are views into pinned host
// mirrors, as ZeRO-Offload does (Ren et al. 2021): the reduce-scattered
// gradients stay in their mirror, weightsToHost(b) copies this rank's
// chunk of the weights up beside them (S/N bytes), the optimizer updates
// them on the host, and gatherWeights() all-gathers the host mirrors and
// copies each bucket back to the device. The GPU holds no optimizer state.
//
// Laid out once: the optimizer holds the slices.
//
// Threading: the compute thread; the gathers run on the communication
// thread, weightsToHost() on whichever thread exchanges the bucket.
// Internal to src/ddp.
#pragma once

#include <memory>
#include <vector>

#include "bigbatch/ddp/distributed_data_parallel.h"
#include "bigbatch/ddp/job_collectives.h"
#include "bucket_reducer.h"
#include "device_staging.h"
#include "gradient_buckets.h"

namespace bigbatch::ddp_detail {

class PartitionedExchange {
 public:
  // Re-points `buckets`' parameters into flat weight buffers of the same
  // layout. `gradientStaging`: the gradients' host mirrors when the
  // buckets are on a device (null on CPU).
  PartitionedExchange(JobCollectives& job, GradientBuckets& buckets, DeviceStaging* gradientStaging,
                      ExchangeObserver onExchange);

  const std::vector<ParameterShard>& shards() const { return shards_; }
  // Staged, after bucket b's reduce-scatter: this rank's weight chunk into
  // the host mirror, beside its summed gradient.
  void weightsToHost(size_t b);
  void gatherWeights();
  double waitWeights();
  std::vector<torch::Tensor> gatherShards(const std::vector<torch::Tensor>& mine);

 private:
  void makeShards(DeviceStaging* gradientStaging);

  JobCollectives& job_;
  GradientBuckets& buckets_;
  ExchangeObserver onExchange_;
  std::vector<torch::Tensor> weights_;  // the flat weight buckets
  std::unique_ptr<DeviceStaging> weightStaging_;  // staged only
  std::vector<ParameterShard> shards_;
  uint64_t gatherTicket_ = 0;  // the last gather in flight (0: none)
};

}  // namespace bigbatch::ddp_detail
