#include "bigbatch/models/layer_rows_tap.h"

#include <algorithm>
#include <utility>

#include "bigbatch/common/error.h"
#include "bigbatch/common/torch_compat.h"

namespace bigbatch {

LayerRowsTap::LayerRowsTap(LayerRowsSink sink, int64_t samples)
    : sink_(std::move(sink)), samples_(samples) {
  BIGBATCH_REQUIRE(samples_ >= 1, InvalidArgument, "a layer tap needs >= 1 sample, got {}",
                   samples_);
  BIGBATCH_CHECK(sink_.inputs && sink_.outputGradients, Error,
                 "a LayerRowsSink needs both its inputs and outputGradients callbacks");
}

void LayerRowsTap::hookOutput(const torch::Tensor& weight, const torch::Tensor& output, int64_t n) {
  if (!output.requires_grad()) return;
  // The hook outlives neither the graph nor this tap's user (the step that
  // installed it runs backward before the next one starts).
  auto deliver = sink_.outputGradients;
  output.register_hook([deliver, weight, n](const torch::Tensor& grad) {
    torch::Tensor g = grad.slice(0, 0, n);
    // [n, C, H, W] -> [n·H·W, C]; [n, C] stays.
    if (g.dim() == 4) g = g.permute({0, 2, 3, 1}).reshape({-1, g.size(1)});
    deliver(weight, g);
  });
}

void LayerRowsTap::conv(const torch::nn::Conv2dImpl& conv, const torch::Tensor& input,
                        const torch::Tensor& output) {
  if (sink_.wants && !sink_.wants(conv.weight)) return;
  const auto& o = conv.options;
  const auto* padding = compat::getIf<torch::ExpandingArray<2>>(&o.padding());
  // A grouped, "same"/"valid"-padded or non-zero-padded convolution would
  // need its own patch layout.
  if (!padding || o.groups() != 1 ||
      !compat::holdsAlternative<torch::enumtype::kZeros>(o.padding_mode())) {
    return;
  }
  const int64_t n = std::min<int64_t>(samples_, input.size(0));
  if (n == 0) return;
  torch::Tensor patches;
  {
    torch::NoGradGuard noGrad;
    // im2col: [n, C·kh·kw, L], channels outermost as [out, C, kh, kw] flattens.
    patches = torch::nn::functional::unfold(
        input.slice(0, 0, n).detach(), torch::nn::functional::UnfoldFuncOptions(*o.kernel_size())
                                           .padding(**padding)
                                           .stride(*o.stride())
                                           .dilation(*o.dilation()));
  }
  sink_.inputs(conv.weight, patches.transpose(1, 2).reshape({-1, patches.size(1)}));
  hookOutput(conv.weight, output, n);
}

void LayerRowsTap::linear(const torch::nn::LinearImpl& linear, const torch::Tensor& input,
                          const torch::Tensor& output) {
  if (sink_.wants && !sink_.wants(linear.weight)) return;
  const int64_t n = std::min<int64_t>(samples_, input.size(0));
  if (n == 0) return;
  sink_.inputs(linear.weight, input.slice(0, 0, n).detach());
  hookOutput(linear.weight, output, n);
}

}  // namespace bigbatch
