// An in-memory labelled image dataset (uint8 pixels) and its loaders.
//
// Fashion-MNIST is read from the IDX files Debian's dataset-fashion-mnist
// package installs in /usr/share/datasets/fashion-mnist, or from a directory
// given by the config (gzip or plain). Immutable after loading; share freely
// between threads.
#pragma once

#include <torch/torch.h>

#include <string>

namespace bigbatch {

struct Dataset {
  std::string name;
  torch::Tensor images;  // uint8 [N, C, H, W]
  torch::Tensor labels;  // int64 [N]
  int64_t numClasses = 0;
  // Per-channel normalisation applied when batches are assembled.
  float mean = 0.f;
  float std = 1.f;

  int64_t size() const { return images.defined() ? images.size(0) : 0; }
};

inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

// split: "train" or "test". `dir` empty means the Debian location. `limit`
// > 0 loads only the first `limit` samples (what takeFirst would keep),
// decompressing no further: the rest of the files is not read or checked.
Dataset loadFashionMnist(const std::string& dir, const std::string& split, int64_t limit = 0);

// Random uint8 images (uniform bytes) and labels (uniform in
// [0, numClasses)) for unit tests and throughput benchmarks. Image i and its
// label depend on (seed, i) alone — not on n or the thread count — so the
// first k images of a larger set are a set of k. Filled in parallel on
// ATen's intra-op threads.
Dataset makeSyntheticDataset(int64_t n, int64_t channels, int64_t height, int64_t width,
                             int64_t numClasses, uint64_t seed);

// The first n samples (n <= 0 or n >= size: all of them). Shares storage.
Dataset takeFirst(const Dataset& d, int64_t n);

}  // namespace bigbatch
