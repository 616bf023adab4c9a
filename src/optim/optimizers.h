// The concrete optimizers behind makeOptimizer(); internal to src/optim.
#pragma once

#include <memory>
#include <vector>

#include "bigbatch/optim/optimizer.h"

namespace bigbatch::optim_detail {

std::unique_ptr<Optimizer> makeSgd(std::vector<NamedParameter> params, const OptimizerOptions& o);
std::unique_ptr<Optimizer> makeLars(std::vector<NamedParameter> params, const OptimizerOptions& o);
std::unique_ptr<Optimizer> makeLamb(std::vector<NamedParameter> params, const OptimizerOptions& o);

// Σ over tensors of per-tensor values at `width` stride, offset k.
double sumColumn(const std::vector<double>& values, int width, int k);

}  // namespace bigbatch::optim_detail
