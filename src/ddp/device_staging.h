// DeviceStaging: the host side of a gradient exchange whose buckets live in
// device memory, for the host collectives (MPI, shared memory) to reduce —
// the path when NCCL is absent or several ranks share one GPU.
//
// Per bucket b (S bytes): ready(b) marks, on the stream that ran the
// backward, the point after which b's gradients are final; toHost(b) copies
// the bucket into a pinned host mirror (S bytes device -> host) on a copy
// stream that first waits for that mark, and waits for the copy; the
// collective then runs on the mirror; toDevice(b) copies it back (S bytes
// host -> device) on the copy stream and waits. So when the communication
// thread reports b done the device holds the sum, and the optimizer, which
// the compute thread enqueues only after finishBackward(), reads it in
// stream order. Pinned mirrors are allocated once per layout (page-locking
// is slow) and make the copies DMA transfers that overlap the backward.
//
// toDevice(b) waits for ready(b)'s mark as well, so a bucket the compute
// stream still reads (the weights, under DdpOptions::partition) is not
// overwritten under it.
//
// Under DdpOptions::partition a second DeviceStaging holds the flat weight
// buckets: their host mirrors are the optimizer's weight slices. It shares
// the gradients' copy stream, so a weight read (toHost) queued after a
// gradient copy runs after everything that copy waited for.
//
// Buckets in host memory may be staged too (DdpOptions::stageThroughHost):
// the copies are then plain memory copies and there is nothing to wait for
// — which lets the tests run this path without a GPU.
//
// Threading: ready() is called on the thread that runs the backward (the
// autograd device thread on CUDA), toHost()/toDevice() on the thread that
// holds the communicator; a bucket is never in both at once (the DDP hands
// b to the communication thread only after ready(b)). Internal to src/ddp.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/torch.h>

#include <memory>
#include <optional>
#include <vector>

namespace bigbatch::ddp_detail {

class DeviceStaging {
 public:
  // `buckets`: flat fp32 buckets, all on one device. `shareStreamOf`: a
  // staging whose copy stream this one uses (null: a stream of its own).
  explicit DeviceStaging(const std::vector<torch::Tensor>& buckets,
                         const DeviceStaging* shareStreamOf = nullptr);

  // Compute side: bucket b is written, or no longer read (in stream order).
  void ready(size_t b);
  // Communication side: elements [begin, end) of b into its host mirror;
  // returns the mirror's first element.
  float* toHost(size_t b, int64_t begin, int64_t end);
  float* toHost(size_t b) { return toHost(b, 0, buckets_[b].numel()); }
  // Communication side: elements [begin, end) of b's mirror back to b.
  void toDevice(size_t b, int64_t begin, int64_t end);
  void toDevice(size_t b) { toDevice(b, 0, buckets_[b].numel()); }

  // Bucket b's host mirror (pinned on CUDA), for views into it.
  const torch::Tensor& host(size_t b) const { return host_[b]; }
  const torch::Device& device() const { return device_; }

 private:
  // dst <- src (a range of bucket b and of its mirror): on the copy stream
  // after ready(b)'s mark, waited for; a plain copy for host buckets.
  void copy(size_t b, torch::Tensor dst, const torch::Tensor& src);

  torch::Device device_{torch::kCPU};
  std::vector<torch::Tensor> buckets_;
  std::vector<torch::Tensor> host_;                 // pinned on CUDA
  std::vector<std::unique_ptr<c10::Event>> ready_;  // CUDA only
  std::optional<c10::Stream> copyStream_;           // CUDA only
};

}  // namespace bigbatch::ddp_detail
