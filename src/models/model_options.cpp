#include "bigbatch/models/model_options.h"

#include "bigbatch/common/error.h"
#include "bigbatch/models/resnet.h"
#include "bigbatch/models/scripted_model.h"
#include "bigbatch/models/small_cnn.h"

namespace bigbatch {

torch::nn::BatchNorm2d makeBatchNorm(int64_t channels, const ModelOptions& options) {
  return torch::nn::BatchNorm2d(
      torch::nn::BatchNorm2dOptions(channels).momentum(options.bnMomentum).eps(options.bnEps));
}

void initConvAndBn(torch::nn::Module& module) {
  torch::NoGradGuard noGrad;
  for (auto& m : module.modules(/*include_self=*/false)) {
    if (auto* conv = m->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(conv->weight, 0.0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      bn->weight.fill_(1.0);
      bn->bias.zero_();
    }
  }
}

std::shared_ptr<ImageClassifierImpl> buildModel(const ModelOptions& options) {
  if (options.name == "cnn") return std::make_shared<SmallCnnImpl>(options);
  if (options.name == "resnet" || options.name == "resnet50") {
    return std::make_shared<ResNetImpl>(options);
  }
  if (options.name == "torchscript") {
    BIGBATCH_REQUIRE(!options.path.empty(), InvalidArgument,
                     "model.name = \"torchscript\" needs model.path, the module file saved from "
                     "Python with torch.jit.script(model).save(FILE)");
    return std::make_shared<ScriptedClassifierImpl>(options.path);
  }
  BIGBATCH_THROW(InvalidArgument,
                 "unknown model '{}'; choose cnn, resnet, resnet50 or torchscript (with "
                 "model.path)",
                 options.name);
}

int64_t countParameters(torch::nn::Module& module) {
  int64_t n = 0;
  for (const auto& p : module.parameters()) n += p.numel();
  return n;
}

}  // namespace bigbatch
