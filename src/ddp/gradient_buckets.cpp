#include "gradient_buckets.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "bigbatch/common/error.h"

namespace bigbatch::ddp_detail {
namespace {

// Runs after a parameter's AccumulateGrad: the gradient is in its bucket.
class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::function<void(size_t)>* onReady, size_t param) : onReady_(onReady), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    (*onReady_)(param_);
    return outputs;
  }

 private:
  std::function<void(size_t)>* onReady_;
  size_t param_;
};

}  // namespace

torch::Tensor shapedLike(const torch::Tensor& flat, const torch::Tensor& p) {
  return p.is_non_overlapping_and_dense() ? flat.as_strided(p.sizes(), p.strides())
                                          : flat.view(p.sizes());
}

GradientBuckets::GradientBuckets(torch::nn::Module& model, bool bindGradients)
    : bind_(bindGradients) {
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    params_.push_back(item.value());
    names_.push_back(item.key());
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    BIGBATCH_REQUIRE(params_[i].dtype() == torch::kFloat32, InvalidArgument,
                     "parameter '{}' is {}; the exchange keeps fp32 master gradients", names_[i],
                     std::string(params_[i].dtype().name()));
  }
  if (!params_.empty()) device_ = params_.front().device();
  for (const auto& p : params_) {
    BIGBATCH_REQUIRE(p.device() == device_, InvalidArgument,
                     "the model's parameters are on {} and {}; move the whole model to one "
                     "device before the exchange is built",
                     device_.str(), p.device().str());
  }
  ready_.assign(params_.size(), 0);
}

GradientBuckets::~GradientBuckets() {
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hookKeys_[i]);
}

std::vector<int64_t> GradientBuckets::numels() const {
  std::vector<int64_t> out;
  for (const auto& p : params_) out.push_back(p.numel());
  return out;
}

void GradientBuckets::layoutFor(size_t fusionBytes) {
  fusion_ = fusionBytes;
  layout_ = layoutBuckets(numels(), fusionBytes, 4, kParameterAlignElements);
  bucketOf_.assign(params_.size(), 0);
  views_.assign(params_.size(), torch::Tensor());
  pending_.assign(layout_.size(), 0);
  buffers_.clear();
  if (!bind_) {
    for (size_t b = 0; b < layout_.size(); ++b) {
      for (const auto& e : layout_[b].entries) bucketOf_[e.param] = b;
    }
    return;
  }
  torch::NoGradGuard noGrad;
  for (size_t b = 0; b < layout_.size(); ++b) {
    buffers_.push_back(torch::zeros({layout_[b].numel}, params_.front().options()));
    for (const auto& e : layout_[b].entries) {
      bucketOf_[e.param] = b;
      torch::Tensor& p = params_[e.param];
      torch::Tensor view = shapedLike(buffers_[b].narrow(0, e.offset, e.numel), p);
      if (p.grad().defined()) view.copy_(p.grad());
      p.mutable_grad() = view;
      views_[e.param] = view;
    }
  }
}

void GradientBuckets::installHooks(std::function<void(size_t param)> onReady) {
  BIGBATCH_CHECK(accumulators_.empty(), Error, "the gradient hooks are installed once");
  onReady_ = std::move(onReady);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    hookKeys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(&onReady_, i)));
    accumulators_.push_back(std::move(acc));
  }
}

void GradientBuckets::zero() {
  if (!bind_) {
    for (auto& p : params_) p.mutable_grad().reset();
    return;
  }
  for (auto& b : buffers_) b.zero_();
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined() || params_[i].grad().data_ptr() != views_[i].data_ptr()) {
      params_[i].mutable_grad() = views_[i];
    }
  }
}

void GradientBuckets::beginSync() {
  std::fill(ready_.begin(), ready_.end(), 0);
  for (size_t b = 0; b < layout_.size(); ++b) {
    pending_[b] = static_cast<int64_t>(layout_[b].entries.size());
  }
  next_ = 0;
}

bool GradientBuckets::markReady(size_t param) {
  if (ready_[param]) return false;
  ready_[param] = 1;
  torch::Tensor& g = params_[param].mutable_grad();
  if (bind_ && g.data_ptr() != views_[param].data_ptr()) {
    // Autograd replaced the gradient tensor: bring it back into the bucket.
    torch::NoGradGuard noGrad;
    views_[param].copy_(g);
    g = views_[param];
  }
  --pending_[bucketOf_[param]];
  return true;
}

bool GradientBuckets::nextComplete(size_t& bucket, bool keepLast) {
  const size_t end = keepLast ? layout_.size() - 1 : layout_.size();
  if (layout_.empty() || next_ >= end || pending_[next_] != 0) return false;
  bucket = next_++;
  return true;
}

}  // namespace bigbatch::ddp_detail
