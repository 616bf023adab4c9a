// ResNets: the small-image family (He et al. 2016, CIFAR variant: a 3x3 stem,
// stages of BasicBlocks with configurable widths and depths) and ImageNet
// ResNet-50 v1.5 (7x7 stem, max-pool, Bottleneck blocks [3,4,6,3], stride on
// the 3x3 conv as in torchvision; 25.6 M parameters in 161 tensors).
// Names match torchvision: conv1, bn1, layerN.I.{conv1,bn1,...,downsample.0,
// downsample.1}, fc.
#pragma once

#include "bigbatch/models/model_options.h"

namespace bigbatch {

// conv3x3-BN-ReLU-conv3x3-BN + shortcut, ReLU.
class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t inPlanes, int64_t planes, int64_t stride, const ModelOptions& options);
  torch::Tensor forward(torch::Tensor x);
  static constexpr int64_t kExpansion = 1;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};
TORCH_MODULE(BasicBlock);

// conv1x1-BN-ReLU-conv3x3(stride)-BN-ReLU-conv1x1-BN + shortcut, ReLU (v1.5).
class BottleneckImpl : public torch::nn::Module {
 public:
  BottleneckImpl(int64_t inPlanes, int64_t planes, int64_t stride, const ModelOptions& options);
  torch::Tensor forward(torch::Tensor x);
  static constexpr int64_t kExpansion = 4;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
  bool fused_ = false;  // ModelOptions::fusedBatchNorm
};
TORCH_MODULE(Bottleneck);

// options.name "resnet": small-image ResNet from widths/blocks.
// options.name "resnet50": ImageNet ResNet-50 v1.5 (widths/blocks ignored).
class ResNetImpl : public ImageClassifierImpl {
 public:
  explicit ResNetImpl(const ModelOptions& options);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  bool imagenetStem_ = false;
  bool fused_ = false;  // ModelOptions::fusedBatchNorm (the stem's BatchNorm+ReLU)
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::vector<torch::nn::Sequential> layers_;
  torch::nn::Linear fc_{nullptr};
};

}  // namespace bigbatch
