// Layer taps: a way for training code to see what a model's convolutions and
// linear layers read and produce without the model knowing who listens.
// Second-order optimizers need exactly that — K-FAC (Martens & Grosse 2015;
// for convolutions Grosse & Martens 2016) builds each layer's curvature
// factors from its inputs and from the gradients of its outputs.
//
// Models run their weight layers through tappedConv() / tappedLinear(). With
// no tap installed on the calling thread these are the plain module calls;
// inside a LayerTapScope they also hand (module, input, output) to the tap,
// which may register gradient hooks on the output.
//
// Threading: the installed tap is per thread (the training thread installs
// it around the forward passes it wants seen); a tap is called only on the
// thread that installed it.
#pragma once

#include <torch/torch.h>

namespace bigbatch {

class LayerTap {
 public:
  virtual ~LayerTap() = default;
  // `output` is still part of the autograd graph when gradients are on.
  virtual void conv(const torch::nn::Conv2dImpl& conv, const torch::Tensor& input,
                    const torch::Tensor& output) = 0;
  virtual void linear(const torch::nn::LinearImpl& linear, const torch::Tensor& input,
                      const torch::Tensor& output) = 0;
};

// Installs `tap` on this thread for the scope's lifetime (nullptr: none);
// restores the previous one on exit.
class LayerTapScope {
 public:
  explicit LayerTapScope(LayerTap* tap);
  ~LayerTapScope();
  LayerTapScope(const LayerTapScope&) = delete;
  LayerTapScope& operator=(const LayerTapScope&) = delete;

 private:
  LayerTap* previous_;
};

torch::Tensor tappedConv(torch::nn::Conv2dImpl& conv, const torch::Tensor& input);
torch::Tensor tappedLinear(torch::nn::LinearImpl& linear, const torch::Tensor& input);

}  // namespace bigbatch
