// A bigbatch model's gradient as the plan sees it: its parameters' element
// counts in the order backward produces them (reverse registration order,
// as ddp/bucket_layout.h packs them). Builds the model once on the CPU
// (ResNet-50: ~0.3 s); not thread-safe (model building draws from libtorch's
// global RNG).
#pragma once

#include <string>
#include <vector>

#include "bigbatch/models/model_options.h"

namespace bigbatch::plan {

std::vector<double> gradientElements(const ModelOptions& model);

// ResNet-50 v1.5 with 1000 classes (torchvision's resnet50: 25,557,032
// parameters in 161 tensors), built as bigbatch's resnet50.
std::vector<double> resnet50ImageNetElements();

// The gradient of a published record's model, 1000 classes: "resnet50"
// (the bigbatch model above), or by torchvision's layout, counted without
// building it: "resnet101" (bottleneck blocks 3, 4, 23, 3: 44,549,160
// parameters) and "vgg16" (13 convolutions and 3 fully connected layers:
// 138,357,544). Throws InvalidArgument for another name.
std::vector<double> imageNetElements(const std::string& model);

// A torchvision bottleneck ResNet with these blocks per stage, counted
// (resnetElements({3, 4, 6, 3}) has ResNet-50's counts).
std::vector<double> bottleneckResNetElements(const std::vector<int>& blocks);

}  // namespace bigbatch::plan
