#include "bigbatch/models/small_cnn.h"

#include "bigbatch/common/error.h"
#include "bigbatch/models/average_pool.h"
#include "bigbatch/models/layer_tap.h"

namespace bigbatch {

SmallCnnImpl::SmallCnnImpl(const ModelOptions& options) {
  BIGBATCH_REQUIRE(!options.widths.empty() && options.widths.size() == options.blocks.size(),
                   InvalidArgument,
                   "model.widths ({} stages) and model.blocks ({} stages) must be non-empty and "
                   "of equal length",
                   options.widths.size(), options.blocks.size());
  int64_t in = options.inChannels;
  int index = 1;
  for (size_t s = 0; s < options.widths.size(); ++s) {
    for (int64_t b = 0; b < options.blocks[s]; ++b) {
      Layer layer;
      layer.conv = register_module(
          "conv" + std::to_string(index),
          torch::nn::Conv2d(torch::nn::Conv2dOptions(in, options.widths[s], 3).padding(1).bias(false)));
      layer.bn = register_module("bn" + std::to_string(index),
                                 makeBatchNorm(options.widths[s], options));
      layer.poolAfter = (b + 1 == options.blocks[s]) && (s + 1 < options.widths.size());
      layers_.push_back(layer);
      in = options.widths[s];
      ++index;
    }
  }
  BIGBATCH_REQUIRE(options.hidden >= 0, InvalidArgument, "model.hidden = {} must be >= 0",
                   options.hidden);
  BIGBATCH_REQUIRE(options.headPool >= 1, InvalidArgument, "model.head_pool = {} must be >= 1",
                   options.headPool);
  headPool_ = options.headPool;
  in *= headPool_ * headPool_;
  if (options.hidden > 0) {
    hidden_ = register_module("hidden", torch::nn::Linear(in, options.hidden));
    in = options.hidden;
  }
  fc_ = register_module("fc", torch::nn::Linear(in, options.numClasses));
  initConvAndBn(*this);
}

torch::Tensor SmallCnnImpl::forward(torch::Tensor x) {
  for (auto& layer : layers_) {
    x = torch::relu(layer.bn(tappedConv(*layer.conv, x)));
    if (layer.poolAfter) x = torch::max_pool2d(x, 2);
  }
  x = adaptiveAvgPool2d(x, headPool_, headPool_).flatten(1);
  if (hidden_) x = torch::relu(tappedLinear(*hidden_, x));
  return tappedLinear(*fc_, x);
}

}  // namespace bigbatch
