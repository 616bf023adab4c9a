// `bigbatch bench step`: the training step's rate — bigbatch's whole step
// (input feed, forward, backward, loss scaling, the fused update) through
// train() on synthetic images, one rank. Each row is one run of two
// epochs of --steps steps: the first is the warm-up (cuDNN's benchmarking,
// the allocator's pools, a CUDA graph's capture), the second is timed
// (its wall time without evaluation). Rows: per precision, the batch
// resident on the device (every step trains on the first batch again: the
// model's cost without the input's; TrainOptions::residentBatch) and, with
// --input, the same step fed by the input pipeline from host memory. The
// table reads like bench/pytorch_resnet50.py's, which measures PyTorch the
// same way (scripts/device-check's profile and resnet sections run both).
#pragma once

#include <string>
#include <vector>

namespace bigbatch {

struct BenchStepOptions {
  std::string model = "resnet50";
  std::string batches = "256";  // images per step; a comma-separated sweep (16,64,256)
  int size = 224;        // image side
  int steps = 48;        // per epoch: warm-up epoch, then the timed one
  std::string precisions = "bf16,fp16";  // tf32, fp32, bf16, fp16
  std::string device = "cuda";
  bool input = false;    // rows fed from the host pipeline too
  bool cudaGraph = false;
  std::string fusedBn = "auto";
  std::vector<std::string> sets;  // more --set key=value
  std::string profileOut;         // a Kineto trace of the timed epoch's first steps (CUDA build)
  std::string runDir;             // where the runs go (default: a fresh folder under /tmp)
  bool json = false;
};

int runBenchStep(const BenchStepOptions& options);

}  // namespace bigbatch
