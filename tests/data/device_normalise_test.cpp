// uint8 batches (PipelineOptions::uint8Batches) flipped and normalised by
// normaliseOnDevice — here on CPU tensors, the same ATen ops a GPU run
// queues on its copy stream — against the float pipeline's batches of the
// same epoch: equal for whole images (synthetic, IDX: the same float
// multiply and add), within the rounding of the resized pixels to 8 bits
// for random resized crops of JPEGs (half an 8-bit step times the scale).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "bigbatch/common/error.h"
#include "bigbatch/data/device_normalise.h"
#include "bigbatch/data/input_pipeline.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

std::vector<std::vector<int64_t>> consecutive(int64_t count, int64_t size) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < size; ++i) out[static_cast<size_t>(b)].push_back(b * size + i);
  }
  return out;
}

// Every batch of one epoch, as the float pipeline makes it and as the uint8
// pipeline's pixels become after normaliseOnDevice.
struct Epoch {
  std::vector<torch::Tensor> floats, normalised;
  int64_t flipped = 0;  // images the uint8 batches mark to mirror
};

Epoch bothWays(const std::shared_ptr<ImageSource>& source, const ImageAugment& augment,
               PipelineOptions o, int64_t batches, int64_t batch, torch::ScalarType dtype) {
  Epoch e;
  {
    InputPipeline p(source, augment, o, /*seed=*/5, /*epoch=*/2, consecutive(batches, batch));
    PipelineBatch b;
    while (p.next(b)) {
      EXPECT_FALSE(b.flips.defined());
      e.floats.push_back(b.images.clone());
    }
  }
  o.uint8Batches = true;
  InputPipeline p(source, augment, o, /*seed=*/5, /*epoch=*/2, consecutive(batches, batch));
  const DeviceNormalisation n = deviceNormalisation(p.normalisation(), torch::kCPU);
  PipelineBatch b;
  while (p.next(b)) {
    EXPECT_EQ(b.images.scalar_type(), torch::kUInt8);
    const bool layoutShows = b.images.size(1) > 1;  // one channel: both layouts at once
    if (layoutShows) {
      EXPECT_EQ(b.images.is_contiguous(at::MemoryFormat::ChannelsLast), o.channelsLast);
    }
    e.flipped += b.flips.sum().item<int64_t>();
    const torch::Tensor y = normaliseOnDevice(b.images, b.flips, n, dtype);
    EXPECT_EQ(y.scalar_type(), dtype);
    if (layoutShows) {
      EXPECT_EQ(y.is_contiguous(at::MemoryFormat::ChannelsLast), o.channelsLast);
    }
    e.normalised.push_back(y.to(torch::kFloat));
  }
  return e;
}

TEST(DeviceNormalise, WholeImagesEqualTheFloatPipelinesBatchesInEveryLayout) {
  auto source = makeSyntheticSource(6 * 16, 3, 20, 24, 10, /*seed=*/11);
  ImageAugment a;
  a.flip = true;
  a.mean = {0.485f, 0.456f, 0.406f};
  a.std = {0.229f, 0.224f, 0.225f};
  for (const bool channelsLast : {true, false}) {
    PipelineOptions o;
    o.channelsLast = channelsLast;
    o.augmentThreads = 2;
    const Epoch e = bothWays(source, a, o, 6, 16, torch::kFloat);
    ASSERT_EQ(e.floats.size(), e.normalised.size());
    // Some images are mirrored and some not (seeded): a normaliser that
    // ignored the flips, or flipped them all, fails below.
    EXPECT_GT(e.flipped, 0);
    EXPECT_LT(e.flipped, 6 * 16);
    for (size_t i = 0; i < e.floats.size(); ++i) {
      // The same float multiply then add per element (a fused multiply-add
      // in one of them would differ by at most one rounding: 1e-6 here).
      EXPECT_TRUE(torch::allclose(e.normalised[i], e.floats[i], /*rtol=*/0, /*atol=*/1e-6))
          << "batch " << i << " (channels-last " << channelsLast << "): max difference "
          << (e.normalised[i] - e.floats[i]).abs().max().item<float>();
    }
  }
}

TEST(DeviceNormalise, OneChannelImagesAndTheCompute16BitTypes) {
  auto source = makeSyntheticSource(4 * 8, 1, 28, 28, 10, /*seed=*/3);
  ImageAugment a;
  a.flip = true;
  a.mean = {0.2860f};
  a.std = {0.3530f};
  PipelineOptions o;  // inline
  o.readThreads = o.decodeThreads = o.augmentThreads = 0;
  for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
    const Epoch e = bothWays(source, a, o, 4, 8, dtype);
    for (size_t i = 0; i < e.floats.size(); ++i) {
      // The float batch cast to the 16-bit type is what the model saw
      // under autocast before: the same values.
      EXPECT_TRUE(torch::equal(e.normalised[i], e.floats[i].to(dtype).to(torch::kFloat)))
          << "batch " << i << " in " << c10::toString(dtype);
    }
  }
}

// Random resized crops of JPEGs: resized on the host, then rounded to 8
// bits; the float pipeline keeps the resized value. The difference is at
// most half an 8-bit step, times the channel's scale 1 / (255 std).
TEST(DeviceNormalise, ResizedCropsAgreeWithinTheRoundingOfTheirPixels) {
  const fs::path root = fs::path(::testing::TempDir()) / ("uint8_" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (const char* cls : {"a", "b"}) {
    fs::create_directories(root / cls);
    for (int i = 0; i < 6; ++i) {
      Image img{48 + 8 * i, 64, 3, {}};
      img.pixels.resize(static_cast<size_t>(img.height * img.width * 3));
      for (size_t k = 0; k < img.pixels.size(); ++k) {
        img.pixels[k] = static_cast<uint8_t>((k * 7 + static_cast<size_t>(i) * 31 + (k / 3) % 13) & 255);
      }
      const std::vector<uint8_t> jpeg = encodeJpeg(img, 90);
      std::ofstream(root / cls / (std::to_string(i) + ".jpg"), std::ios::binary)
          .write(reinterpret_cast<const char*>(jpeg.data()), static_cast<std::streamsize>(jpeg.size()));
    }
  }
  auto source = makeImageFolderSource(root.string());
  ImageAugment a;
  a.outHeight = a.outWidth = 24;
  a.randomResizedCrop = true;
  a.flip = true;
  a.mean = {0.485f, 0.456f, 0.406f};
  a.std = {0.229f, 0.224f, 0.225f};
  PipelineOptions o;
  o.channelsLast = true;
  const Epoch e = bothWays(source, a, o, 3, 4, torch::kFloat);
  const torch::Tensor halfStep =
      torch::tensor({0.5f / (255.f * 0.229f), 0.5f / (255.f * 0.224f), 0.5f / (255.f * 0.225f)})
          .view({1, 3, 1, 1});
  int64_t exact = 0, total = 0;
  for (size_t i = 0; i < e.floats.size(); ++i) {
    const torch::Tensor d = (e.normalised[i] - e.floats[i]).abs();
    EXPECT_TRUE((d <= halfStep * 1.0001 + 1e-6).all().item<bool>())
        << "batch " << i << ": max difference " << d.max().item<float>();
    exact += (d <= 1e-6).sum().item<int64_t>();
    total += d.numel();
  }
  // Not the same batch by accident of a constant image: most values moved.
  EXPECT_LT(exact, total);
  fs::remove_all(root);
}

TEST(DeviceNormalise, BadInputIsRefusedNamingIt) {
  const DeviceNormalisation n = deviceNormalisation({{1.f, 1.f, 1.f}, {0.f, 0.f, 0.f}}, torch::kCPU);
  const torch::Tensor flips = torch::zeros({2}, torch::kUInt8);
  EXPECT_THROW(normaliseOnDevice(torch::zeros({2, 3, 4, 4}), flips, n, torch::kFloat),
               InvalidArgument);  // float pixels
  EXPECT_THROW(normaliseOnDevice(torch::zeros({2, 1, 4, 4}, torch::kUInt8), flips, n, torch::kFloat),
               InvalidArgument);  // 1 channel, 3 factors
  EXPECT_THROW(normaliseOnDevice(torch::zeros({3, 3, 4, 4}, torch::kUInt8), flips, n, torch::kFloat),
               InvalidArgument);  // 2 flips for 3 images
}

}  // namespace
}  // namespace bigbatch
