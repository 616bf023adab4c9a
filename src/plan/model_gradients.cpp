#include "bigbatch/plan/model_gradients.h"

#include <algorithm>

#include "bigbatch/common/error.h"

namespace bigbatch::plan {
namespace {

constexpr double kClasses = 1000;

// Registration order, as torchvision's modules list their parameters.
void conv(std::vector<double>& out, double in, double outCh, double k, bool bias) {
  out.push_back(outCh * in * k * k);
  if (bias) out.push_back(outCh);
}
void batchNorm(std::vector<double>& out, double ch) {
  out.push_back(ch);  // weight
  out.push_back(ch);  // bias
}
void linear(std::vector<double>& out, double in, double outFeatures) {
  out.push_back(outFeatures * in);
  out.push_back(outFeatures);
}

std::vector<double> backwardOrder(std::vector<double> registered) {
  std::reverse(registered.begin(), registered.end());
  return registered;
}

std::vector<double> vgg16Elements() {
  std::vector<double> p;
  const double widths[] = {64, 64,  0,   128, 128, 0,   256, 256, 256,
                           0,  512, 512, 512, 0,   512, 512, 512};
  double in = 3;
  for (double w : widths) {
    if (w == 0) continue;  // max pooling
    conv(p, in, w, 3, /*bias=*/true);
    in = w;
  }
  linear(p, 512 * 7 * 7, 4096);
  linear(p, 4096, 4096);
  linear(p, 4096, kClasses);
  return backwardOrder(p);
}

}  // namespace

std::vector<double> bottleneckResNetElements(const std::vector<int>& blocks) {
  std::vector<double> p;
  conv(p, 3, 64, 7, false);
  batchNorm(p, 64);
  double in = 64;
  for (size_t stage = 0; stage < blocks.size(); ++stage) {
    const double width = 64.0 * static_cast<double>(1 << stage), out = 4 * width;
    for (int b = 0; b < blocks[stage]; ++b) {
      conv(p, in, width, 1, false);
      batchNorm(p, width);
      conv(p, width, width, 3, false);
      batchNorm(p, width);
      conv(p, width, out, 1, false);
      batchNorm(p, out);
      if (b == 0) {  // the projection shortcut
        conv(p, in, out, 1, false);
        batchNorm(p, out);
      }
      in = out;
    }
  }
  linear(p, in, kClasses);
  return backwardOrder(p);
}

std::vector<double> imageNetElements(const std::string& model) {
  if (model == "resnet50") return resnet50ImageNetElements();
  if (model == "resnet101") return bottleneckResNetElements({3, 4, 23, 3});
  if (model == "vgg16") return vgg16Elements();
  BIGBATCH_THROW(InvalidArgument,
                 "no gradient layout for published model '{}' (resnet50, "
                 "resnet101 or vgg16)",
                 model);
}

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
