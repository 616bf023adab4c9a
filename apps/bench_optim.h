// `bigbatch bench optim`: the fused optimizer step against the naive
// per-tensor loop (one ATen call per tensor per operation), side by side in
// one run, on a model's parameter set (on the CPU or a GPU); plus the
// memory-bandwidth bound. With
// --partitioned (under mpirun), the unpartitioned fused step against the
// partitioned one (ZeRO-1), each rank updating 1/N of the parameters.
#pragma once

#include <string>

namespace bigbatch {

struct BenchOptimOptions {
  std::string models = "resnet50,cnn";  // parameter sets: resnet50 (161 tensors, 25.6 M) and/or cnn (the default model)
  std::string optimizers = "lars,lamb,sgd";
  int iterations = 0;  // timed steps per path; 0: 4e8 / values, within 20..5000
  int threads = 0;     // intra-op threads; 0: all cores
  bool json = false;   // one JSON object per row instead of the table
  // cpu, or cuda (the CUDA build): the parameters on GPU 0, the fused path
  // being the device kernels (src/optim/fused_step.h) and the bound the
  // device's own copy bandwidth.
  std::string device = "cpu";
  // Under mpirun with N ranks: the whole step against the partitioned one
  // (ddp.partition = optimizer: 1/N of every bucket and the norm collective),
  // side by side, instead of fused against naive.
  bool partitioned = false;
};

int runBenchOptim(const BenchOptimOptions& options);

}  // namespace bigbatch
