// Options shared by the model builders, and the factory that builds a model
// by name ("cnn", "resnet", "resnet50", or "torchscript": the user's module
// file in `path`, models/scripted_model.h) from them.
//
// Parameter and buffer names follow PyTorch/torchvision conventions
// (`layer1.0.conv1.weight`, `bn1.running_mean`, `fc.bias`) so state dicts
// move between bigbatch and Python. Building is not thread-safe (it draws
// from the global libtorch RNG, seeded by the caller).
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace bigbatch {

struct ModelOptions {
  std::string name = "cnn";
  std::vector<int64_t> widths = {16, 32, 64};  // channels per stage
  std::vector<int64_t> blocks = {2, 2, 1};     // conv layers (cnn) or residual blocks per stage
  int64_t inChannels = 1;
  int64_t numClasses = 10;
  double bnMomentum = 0.1;  // PyTorch convention: running = (1-m)·running + m·batch
  double bnEps = 1e-5;
  bool zeroInitResidual = true;  // γ = 0 in the last BN of each residual block (Goyal et al. 2017)
  // cnn only: > 0 puts a hidden fully-connected layer ("hidden", ReLU) of
  // this width between the pooled features and "fc" — much gradient for
  // little compute: 350,000 gives ResNet-50's 25.6 M gradient values on a
  // 35.7 k-parameter convolutional body (the exchange-bound benchmark model).
  int64_t hidden = 0;
  // cnn only: the classifier reads the last stage's features average-pooled
  // to headPool x headPool (headPool² · width inputs) instead of to one
  // value per channel — where things are, not only whether they are, which
  // a shallow network with a small receptive field cannot otherwise see.
  // 1: global average pooling.
  int64_t headPool = 1;
  // resnet50 only: BatchNorm+ReLU and BatchNorm+add+ReLU as one cuDNN call
  // each where the input allows (fused_batch_norm.h); the unfused layers
  // elsewhere. The same parameters and buffers either way.
  bool fusedBatchNorm = false;
  // torchscript only: the module file (torch.jit.save). The other options
  // do not apply: the file holds the architecture and its weights.
  std::string path;
};

// A model is a torch::nn::Module whose forward maps [B,C,H,W] to logits [B,K].
class ImageClassifierImpl : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // Buffers that are frozen parameters (a TorchScript model's parameters
  // with requires_grad off): the same on every rank, so never averaged like
  // BatchNorm statistics, and saved once with the parameters, not per rank.
  // None for the zoo's models.
  virtual std::vector<std::string> frozenParameterNames() const { return {}; }
  // Tied tensors: (a second name, the name the tensor is registered under),
  // as PyTorch's state_dict() lists a tensor reachable under two names.
  virtual std::vector<std::pair<std::string, std::string>> tensorAliases() const { return {}; }
};

std::shared_ptr<ImageClassifierImpl> buildModel(const ModelOptions& options);

int64_t countParameters(torch::nn::Module& module);

// Conv weights: He-normal, fan-out (He et al. 2015, as torchvision's ResNet);
// BN: γ = 1, β = 0.
void initConvAndBn(torch::nn::Module& module);

torch::nn::BatchNorm2d makeBatchNorm(int64_t channels, const ModelOptions& options);

}  // namespace bigbatch
