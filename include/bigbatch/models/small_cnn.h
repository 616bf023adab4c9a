// A plain convolutional network for small images: stages of
// conv3x3-BN-ReLU layers (`blocks[s]` layers of `widths[s]` channels), a 2x2
// max-pool between stages, global average pooling and one linear layer.
// Layers are named conv1, bn1, conv2, bn2, ... in order, then fc (with
// ModelOptions::hidden, a linear layer "hidden" and a ReLU before it).
#pragma once

#include "bigbatch/models/model_options.h"

namespace bigbatch {

class SmallCnnImpl : public ImageClassifierImpl {
 public:
  explicit SmallCnnImpl(const ModelOptions& options);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  struct Layer {
    torch::nn::Conv2d conv{nullptr};
    torch::nn::BatchNorm2d bn{nullptr};
    bool poolAfter = false;
  };
  std::vector<Layer> layers_;
  torch::nn::Linear hidden_{nullptr};  // null unless ModelOptions::hidden > 0
  torch::nn::Linear fc_{nullptr};
  int64_t headPool_ = 1;  // ModelOptions::headPool
};

}  // namespace bigbatch
