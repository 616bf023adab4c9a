#include "bigbatch/data/dataset.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "bigbatch/common/error.h"
#include "bigbatch/data/idx_reader.h"
#include "bigbatch/data/sampler.h"

namespace bigbatch {
namespace {

// Finds "<stem>" or "<stem>.gz" in dir.
std::string findIdx(const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  for (const std::string& candidate : {stem + ".gz", stem}) {
    fs::path p = fs::path(dir) / candidate;
    if (fs::exists(p)) return p.string();
  }
  BIGBATCH_THROW(IoError,
                 "Fashion-MNIST file '{}[.gz]' not found in '{}'; install it with "
                 "`apt-get install dataset-fashion-mnist` or set data.path to a directory "
                 "holding the four IDX files",
                 stem, dir);
}

}  // namespace

Dataset loadFashionMnist(const std::string& dirIn, const std::string& split, int64_t limit) {
  BIGBATCH_REQUIRE(split == "train" || split == "test", InvalidArgument,
                   "split must be 'train' or 'test', got '{}'", split);
  const std::string dir = dirIn.empty() ? kFashionMnistDefaultDir : dirIn;
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string imagePath = findIdx(dir, prefix + "-images-idx3-ubyte");
  const std::string labelPath = findIdx(dir, prefix + "-labels-idx1-ubyte");
  int64_t imagesInFile = 0, labelsInFile = 0;
  torch::Tensor images = readIdx(imagePath, 3, limit, &imagesInFile);
  torch::Tensor labels = readIdx(labelPath, 1, limit, &labelsInFile);
  if (images.size(1) != 28 || images.size(2) != 28) {
    BIGBATCH_THROW(IoError, "'{}': images are {}x{}, Fashion-MNIST images are 28x28", imagePath,
                   images.size(1), images.size(2));
  }
  if (labelsInFile != imagesInFile) {
    BIGBATCH_THROW(IoError, "label count {} in '{}' differs from image count {} in '{}'",
                   labelsInFile, labelPath, imagesInFile, imagePath);
  }
  const int64_t maxLabel = labels.max().item<int64_t>();
  if (maxLabel >= 10) {
    BIGBATCH_THROW(IoError, "'{}' holds label {}; Fashion-MNIST labels are 0..9", labelPath,
                   maxLabel);
  }
  Dataset d;
  d.name = "fashion-mnist-" + split;
  d.images = images.unsqueeze(1).contiguous();
  d.labels = labels.to(torch::kInt64);
  d.numClasses = 10;
  // Mean and standard deviation of the Fashion-MNIST training pixels in [0, 1].
  d.mean = 0.2860f;
  d.std = 0.3530f;
  return d;
}

Dataset makeSyntheticDataset(int64_t n, int64_t channels, int64_t height, int64_t width,
                             int64_t numClasses, uint64_t seed) {
  BIGBATCH_REQUIRE(n >= 0 && channels >= 1 && height >= 1 && width >= 1 && numClasses >= 1,
                   InvalidArgument,
                   "synthetic data: {} images of {}x{}x{} in {} classes; give sizes and classes "
                   ">= 1",
                   n, channels, height, width, numClasses);
  constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // splitmix64's increment
  const int64_t pixels = channels * height * width;
  Dataset d;
  d.name = "synthetic";
  d.images = torch::empty({n, channels, height, width}, torch::kUInt8);
  d.labels = torch::empty({n}, torch::kInt64);
  uint8_t* images = d.images.data_ptr<uint8_t>();
  int64_t* labels = d.labels.data_ptr<int64_t>();
  // Image i is the splitmix64 stream (Steele et al. 2014) seeded by
  // (seed, i): its label from the first word, its bytes 8 to a word after.
  // ~1 ns per 8 bytes, where torch::randint took ~11 ns per byte (10 s for
  // the 6,144 ResNet-50-sized images a GPU benchmark uses).
  at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      uint64_t state = mixSeed(seed, static_cast<uint64_t>(i));
      labels[i] = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(numClasses));
      uint8_t* out = images + i * pixels;
      for (int64_t j = 0; j < pixels; j += 8) {
        state += kGolden;
        const uint64_t word = splitmix64(state);
        std::memcpy(out + j, &word, static_cast<size_t>(std::min<int64_t>(8, pixels - j)));
      }
    }
  });
  d.numClasses = numClasses;
  d.mean = 0.5f;
  d.std = 0.29f;
  return d;
}

Dataset takeFirst(const Dataset& d, int64_t n) {
  if (n <= 0 || n >= d.size()) return d;
  Dataset out = d;
  out.images = d.images.narrow(0, 0, n);
  out.labels = d.labels.narrow(0, 0, n);
  return out;
}

}  // namespace bigbatch
