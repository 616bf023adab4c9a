// The optimizer over the whole model or over this rank's slices of it
// (ddp.partition = optimizer; ZeRO stage 1), and its state in the one form
// checkpoints hold: whole parameter-shaped buffers named as an
// unpartitioned optimizer names them. A checkpoint of a partitioned run is
// therefore the same file an unpartitioned run writes: it resumes on any
// world size, partitioned or not (each rank slices what it owns), and
// `bigbatch export` and Python read it as before.
//
// For custom training loops too (the trainer uses exactly these). The
// functions that gather or slice across ranks are collectives when the
// exchange is partitioned: every rank calls them at the same point, from the
// thread that steps the optimizer. After each applied step call
// ddp.gatherWeights(), and ddp.waitWeights() before the weights are read.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "bigbatch/ckpt/checkpoint.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "bigbatch/optim/optimizer.h"

namespace bigbatch {

// makeOptimizer over the model's parameters, or — partitioned — over this
// rank's slices (their gradients the reduce-scattered ones), tied to the
// other ranks' slices by one norm collective per step.
std::unique_ptr<Optimizer> makeRunOptimizer(torch::nn::Module& model, DistributedDataParallel& ddp,
                                            const OptimizerOptions& options);

// The state as an unpartitioned optimizer's state() would give it.
NamedTensors wholeOptimizerState(const Optimizer& optimizer, DistributedDataParallel& ddp);
// Loads such a state (from any world size); partitioned, each rank keeps its slices.
void loadWholeOptimizerState(Optimizer& optimizer, DistributedDataParallel& ddp,
                             const NamedTensors& state);

}  // namespace bigbatch
