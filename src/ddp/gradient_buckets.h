// GradientBuckets: a model's gradients in flat fp32 buckets, and which of
// them backward has completed.
//
// Each exchanged parameter's .grad() is a view into its bucket
// (bucket_layout.h), so backward accumulates straight into the buffers that
// are exchanged; a post-hook on every parameter's gradient accumulator marks
// it ready. Buckets are handed out complete and strictly in bucket order —
// a bucket only once every bucket before it is complete — so all ranks
// reduce the same buckets in the same order (Li et al., "PyTorch
// Distributed", VLDB 2020). layoutFor() lays the buckets out anew (the
// fusion tuner's candidates) and re-points every gradient.
//
// A lone rank on a GPU exchanges nothing, and then the buckets hold
// nothing either (`bindGradients` false; distributed_data_parallel.cpp): the layout is still computed (the
// banner and the rank check read it), but no buffer is allocated, no
// gradient is a view, zero() sets every gradient to none and backward's
// AccumulateGrad keeps the tensor it made — no bucket to clear, no copy
// into a view. The gradients are the same values either way (x, or 0 + x).
//
// Threading: one compute thread; the hooks run on the thread that runs
// backward (the compute thread on CPU). Internal to src/ddp.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/ddp/bucket_layout.h"

namespace bigbatch::ddp_detail {

// A flat slice seen with `p`'s shape and strides (channels-last stays
// channels-last, so gradient accumulation is a dense add).
torch::Tensor shapedLike(const torch::Tensor& flat, const torch::Tensor& p);

class GradientBuckets {
 public:
  // The parameters of `model` that require grad, in registration order:
  // fp32 (the exchange keeps fp32 master gradients), all on one device.
  // `bindGradients` false: the layout only (see above).
  explicit GradientBuckets(torch::nn::Module& model, bool bindGradients = true);
  ~GradientBuckets();  // removes the hooks
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  const std::vector<torch::Tensor>& params() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  std::vector<int64_t> numels() const;
  bool empty() const { return params_.empty(); }
  const torch::Device& device() const { return device_; }
  bool bindsGradients() const { return bind_; }

  // (Re)builds the buckets for a cap of `fusionBytes`, each entry 64-byte
  // aligned (kParameterAlignElements, bucket_layout.h), and points every
  // gradient into them (a gradient already there is carried over).
  void layoutFor(size_t fusionBytes);
  size_t fusionBytes() const { return fusion_; }
  const std::vector<Bucket>& layout() const { return layout_; }
  std::vector<torch::Tensor>& buffers() { return buffers_; }
  size_t bucketOf(size_t param) const { return bucketOf_[param]; }

  // Calls `onReady(param)` after each parameter's gradient is accumulated.
  void installHooks(std::function<void(size_t param)> onReady);
  // Zeroes every bucket and re-attaches a view user code replaced or
  // dropped; without bound gradients, sets every gradient to none.
  void zero();
  // Before a synced backward: nothing ready, nothing handed out.
  void beginSync();
  // The gradient of `param` is final (its hook ran): brought back into the
  // bucket if autograd replaced the tensor. False when it already was.
  bool markReady(size_t param);
  // The next bucket in order whose parameters are all ready and which was
  // not handed out yet, `keepLast`: never the last bucket.
  bool nextComplete(size_t& bucket, bool keepLast);
  // The first bucket not handed out (== layout().size() when all were);
  // handOutAll() marks every bucket handed out.
  size_t firstNotHandedOut() const { return next_; }
  void handOutAll() { next_ = layout_.size(); }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  bool bind_ = true;
  std::function<void(size_t)> onReady_;  // the hooks hold its address
  torch::Device device_{torch::kCPU};
  size_t fusion_ = 0;
  std::vector<Bucket> layout_;
  std::vector<torch::Tensor> buffers_;  // one flat fp32 tensor per bucket
  std::vector<size_t> bucketOf_;        // param -> bucket
  std::vector<torch::Tensor> views_;    // param -> its gradient view
  // What grad_accumulator returns: a std::shared_ptr in PyTorch 1.13 and
  // 2.11, a c10::intrusive_ptr in 2.15.
  using Accumulator =
      decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));
  std::vector<Accumulator> accumulators_;
  std::vector<uintptr_t> hookKeys_;
  std::vector<char> ready_;
  std::vector<int64_t> pending_;  // per bucket: params not yet ready
  size_t next_ = 0;               // the next bucket to hand out
};

}  // namespace bigbatch::ddp_detail
