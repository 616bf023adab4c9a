#include "bigbatch/models/resnet.h"

#include "bigbatch/common/error.h"
#include "bigbatch/models/average_pool.h"
#include "bigbatch/models/fused_batch_norm.h"
#include "bigbatch/models/layer_tap.h"

namespace bigbatch {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, k).stride(stride).padding(k / 2).bias(false));
}

// A 1x1 projection shortcut when shape changes, as torchvision (option B).
torch::nn::Sequential shortcut(int64_t in, int64_t out, int64_t stride,
                               const ModelOptions& options) {
  if (stride == 1 && in == out) return nullptr;
  return torch::nn::Sequential(conv(in, out, 1, stride), makeBatchNorm(out, options));
}

// The projection shortcut (conv, BN) with its convolution tapped.
torch::Tensor runShortcut(torch::nn::Sequential& shortcut, const torch::Tensor& x) {
  torch::Tensor y = tappedConv(*shortcut->ptr(0)->as<torch::nn::Conv2d>(), x);
  return shortcut->ptr(1)->as<torch::nn::BatchNorm2d>()->forward(y);
}

// relu(bn(y)): one cuDNN call where `fused` and the input allow
// (fused_batch_norm.h), else the two layers.
torch::Tensor bnRelu(torch::nn::BatchNorm2d& bn, const torch::Tensor& y, bool fused) {
  if (fused) {
    if (torch::Tensor out = batchNormRelu(*bn, y); out.defined()) return out;
  }
  return torch::relu(bn(y));
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t inPlanes, int64_t planes, int64_t stride,
                               const ModelOptions& options) {
  conv1_ = register_module("conv1", conv(inPlanes, planes, 3, stride));
  bn1_ = register_module("bn1", makeBatchNorm(planes, options));
  conv2_ = register_module("conv2", conv(planes, planes, 3, 1));
  bn2_ = register_module("bn2", makeBatchNorm(planes, options));
  downsample_ = shortcut(inPlanes, planes, stride, options);
  if (downsample_) register_module("downsample", downsample_);
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor out = torch::relu(bn1_(tappedConv(*conv1_, x)));
  out = bn2_(tappedConv(*conv2_, out));
  out += downsample_ ? runShortcut(downsample_, x) : x;
  return torch::relu(out);
}

BottleneckImpl::BottleneckImpl(int64_t inPlanes, int64_t planes, int64_t stride,
                               const ModelOptions& options) {
  conv1_ = register_module("conv1", conv(inPlanes, planes, 1, 1));
  bn1_ = register_module("bn1", makeBatchNorm(planes, options));
  conv2_ = register_module("conv2", conv(planes, planes, 3, stride));
  bn2_ = register_module("bn2", makeBatchNorm(planes, options));
  conv3_ = register_module("conv3", conv(planes, planes * kExpansion, 1, 1));
  bn3_ = register_module("bn3", makeBatchNorm(planes * kExpansion, options));
  downsample_ = shortcut(inPlanes, planes * kExpansion, stride, options);
  if (downsample_) register_module("downsample", downsample_);
  fused_ = options.fusedBatchNorm;
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  torch::Tensor out = bnRelu(bn1_, tappedConv(*conv1_, x), fused_);
  out = bnRelu(bn2_, tappedConv(*conv2_, out), fused_);
  const torch::Tensor y = tappedConv(*conv3_, out);
  if (fused_) {
    // relu(bn3(y) + shortcut) in one call: the shortcut first.
    const torch::Tensor shortcut = downsample_ ? runShortcut(downsample_, x) : x;
    if (torch::Tensor sum = batchNormRelu(*bn3_, y, shortcut); sum.defined()) return sum;
    out = bn3_(y);
    out += shortcut;
    return torch::relu(out);
  }
  out = bn3_(y);
  out += downsample_ ? runShortcut(downsample_, x) : x;
  return torch::relu(out);
}

ResNetImpl::ResNetImpl(const ModelOptions& options) {
  imagenetStem_ = options.name == "resnet50";
  fused_ = options.fusedBatchNorm;
  std::vector<int64_t> widths = options.widths;
  std::vector<int64_t> blocks = options.blocks;
  if (imagenetStem_) {
    widths = {64, 128, 256, 512};
    blocks = {3, 4, 6, 3};
  }
  BIGBATCH_REQUIRE(!widths.empty() && widths.size() == blocks.size(), InvalidArgument,
                   "model.widths ({} stages) and model.blocks ({} stages) must be non-empty and "
                   "of equal length",
                   widths.size(), blocks.size());
  const int64_t expansion = imagenetStem_ ? BottleneckImpl::kExpansion : BasicBlockImpl::kExpansion;
  int64_t inPlanes = widths[0];
  conv1_ = register_module("conv1", imagenetStem_ ? conv(options.inChannels, 64, 7, 2)
                                                  : conv(options.inChannels, widths[0], 3, 1));
  bn1_ = register_module("bn1", makeBatchNorm(inPlanes, options));
  for (size_t s = 0; s < widths.size(); ++s) {
    torch::nn::Sequential stage;
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const int64_t stride = (b == 0 && s > 0) ? 2 : 1;
      if (imagenetStem_) {
        stage->push_back(Bottleneck(inPlanes, widths[s], stride, options));
      } else {
        stage->push_back(BasicBlock(inPlanes, widths[s], stride, options));
      }
      inPlanes = widths[s] * expansion;
    }
    layers_.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  fc_ = register_module("fc", torch::nn::Linear(inPlanes, options.numClasses));
  initConvAndBn(*this);
  if (options.zeroInitResidual) {
    // Each residual branch starts as identity, which helps large-batch
    // training (Goyal et al. 2017, section 5.1).
    torch::NoGradGuard noGrad;
    const std::string last = imagenetStem_ ? ".bn3.weight" : ".bn2.weight";
    for (auto& item : named_parameters()) {
      const std::string& name = item.key();
      if (name.size() > last.size() &&
          name.compare(name.size() - last.size(), last.size(), last) == 0) {
        item.value().zero_();
      }
    }
  }
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = bnRelu(bn1_, tappedConv(*conv1_, x), fused_);
  if (imagenetStem_) x = torch::max_pool2d(x, 3, 2, 1);
  for (auto& stage : layers_) x = stage->forward(x);
  x = adaptiveAvgPool2d(x, 1, 1).flatten(1);
  return tappedLinear(*fc_, x);
}

}  // namespace bigbatch
