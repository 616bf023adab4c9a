// `bigbatch export SOURCE OUT`: a run's trained weights out to PyTorch.
//
//   OUT.pt      a state dict torch.load reads: a run directory's model.pt,
//               a weights file, or a training checkpoint's weights with the
//               BatchNorm statistics its run evaluates with (the mean over
//               its ranks, or rank 0's: train.average_bn_stats);
//   OUT.jit.pt  for a model.name = "torchscript" run, the trained module
//               torch.jit.load reads: a run directory's model.jit.pt, or a
//               checkpoint's weights and evaluation statistics in the module
//               of its model.path.
//
// A module of its own above train: it reads the recipe a checkpoint holds
// (train's keys) and builds the user's TorchScript model (models).
// Threading: the caller's thread.
#pragma once

#include <string>

namespace bigbatch {

// Writes `target` from `source`; returns the line that says what it wrote
// and how Python loads it. Throws IoError / InvalidArgument naming the
// problem (a run that did not finish, not a checkpoint, another model).
std::string exportWeights(const std::string& source, const std::string& target);

}  // namespace bigbatch
