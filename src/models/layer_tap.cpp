#include "bigbatch/models/layer_tap.h"

namespace bigbatch {
namespace {
thread_local LayerTap* installed = nullptr;
}  // namespace

LayerTapScope::LayerTapScope(LayerTap* tap) : previous_(installed) { installed = tap; }

LayerTapScope::~LayerTapScope() { installed = previous_; }

torch::Tensor tappedConv(torch::nn::Conv2dImpl& conv, const torch::Tensor& input) {
  torch::Tensor output = conv.forward(input);
  if (installed) installed->conv(conv, input, output);
  return output;
}

torch::Tensor tappedLinear(torch::nn::LinearImpl& linear, const torch::Tensor& input) {
  torch::Tensor output = linear.forward(input);
  if (installed) installed->linear(linear, input, output);
  return output;
}

}  // namespace bigbatch
