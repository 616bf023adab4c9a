#include "bigbatch/plan/model_gradients.h"

namespace bigbatch::plan {

std::vector<double> gradientElements(const ModelOptions& options) {
  auto model = buildModel(options);
  const auto params = model->parameters();
  std::vector<double> elements;
  for (auto it = params.rbegin(); it != params.rend(); ++it)
    elements.push_back(static_cast<double>(it->numel()));
  return elements;
}

std::vector<double> resnet50ImageNetElements() {
  ModelOptions options;
  options.name = "resnet50";
  options.inChannels = 3;
  options.numClasses = 1000;
  return gradientElements(options);
}

}  // namespace bigbatch::plan
