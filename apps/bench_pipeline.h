// `bigbatch bench pipeline`: the input pipeline (src/data) on a folder of
// JPEGs — decode, random resized crop, flip, normalise, batch — timed per
// epoch, with the CPU seconds it used (getrusage), so img/s per fully busy
// worker = images / CPU seconds. bench/pipeline_bench.sh runs it beside
// torchvision's ImageFolder + DataLoader on the same files. --in-memory
// times the path in-memory data (synthetic, Fashion-MNIST) takes instead:
// no decode, no crop — planes to pixels, flip, normalise, batch. --decode gpu
// times the GPU decode path instead (data/gpu_jpeg_pipeline.h: nvJPEG, the
// crop, flip and normalisation on the GPU, bfloat16 channels-last batches in
// device memory, as a bf16 run's input), the host CPU time beside it.
#pragma once

#include <string>

namespace bigbatch {

struct BenchPipelineOptions {
  std::string dir;          // root/<class>/<image>.jpg; empty: synthetic 500x375 images
  bool inMemory = false;    // uint8 images in memory, whole (size x size), channels-last batches
  int workers = 2;          // decode threads; augment threads = workers; one read thread
  int size = 224;           // output side
  int batch = 64;
  int epochs = 1;
  int prefetch = 4;         // batches in flight
  long long cacheMb = 0;    // decoded-image cache budget (MiB); 0: none
  std::string decode = "cpu";  // "gpu": the GPU decode path (--dir only; --workers readers)
  bool json = false;
};

int runBenchPipeline(const BenchPipelineOptions& options);

}  // namespace bigbatch
