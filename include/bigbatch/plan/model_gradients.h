// A bigbatch model's gradient as the plan sees it: its parameters' element
// counts in the order backward produces them (reverse registration order,
// as ddp/bucket_layout.h packs them). Builds the model once on the CPU
// (ResNet-50: ~0.3 s); not thread-safe (model building draws from libtorch's
// global RNG).
#pragma once

#include <vector>

#include "bigbatch/models/model_options.h"

namespace bigbatch::plan {

std::vector<double> gradientElements(const ModelOptions& model);

// ResNet-50 v1.5 with 1000 classes (torchvision's resnet50: 25,557,032
// parameters in 161 tensors), the model of every published record.
std::vector<double> resnet50ImageNetElements();

}  // namespace bigbatch::plan
