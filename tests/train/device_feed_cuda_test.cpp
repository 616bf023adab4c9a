// The input's way to the GPU (CUDA build, label "cuda"): with
// PipelineOptions::pinMemory the pipeline's workers assemble batches in
// pinned memory, and DeviceFeed sends each to the device on its copy stream
// while the compute stream is busy. Every batch must arrive exactly as the
// CPU pipeline makes it — a pinned buffer the pool reused while its copy was
// still in flight would show here as a batch with another batch's pixels.
#include <gtest/gtest.h>

#include "bigbatch/data/image_source.h"
#include "bigbatch/data/input_pipeline.h"
#include "device_feed.h"

namespace bigbatch {
namespace {

std::vector<std::vector<int64_t>> consecutiveBatches(int64_t count, int64_t size) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(count));
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < size; ++i) out[static_cast<size_t>(b)].push_back(b * size + i);
  }
  return out;
}

TEST(DeviceFeedCuda, PinnedBatchesArriveOnTheDeviceExactlyAsTheCpuPipelineMakesThem) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t batches = 24, batch = 64;
  auto source = makeSyntheticSource(batches * batch, 3, 64, 64, 10, /*seed=*/7);
  ImageAugment augment;
  augment.flip = true;  // seeded: the same flips in both pipelines
  augment.mean = {0.5f};
  augment.std = {0.25f};
  PipelineOptions threaded;
  threaded.readThreads = 1;
  threaded.decodeThreads = 1;
  threaded.augmentThreads = 2;
  threaded.prefetchBatches = 2;
  threaded.channelsLast = true;

  // The reference: the same epoch on the CPU, unpinned.
  std::vector<torch::Tensor> expected;
  {
    InputPipeline cpu(source, augment, threaded, 1, 1, consecutiveBatches(batches, batch));
    PipelineBatch b;
    while (cpu.next(b)) expected.push_back(b.images.clone());
  }

  PipelineOptions pinned = threaded;
  pinned.pinMemory = true;
  InputPipeline pipeline(source, augment, pinned, 1, 1, consecutiveBatches(batches, batch));
  const torch::Device gpu(torch::kCUDA, 0);
  train_detail::DeviceFeed feed(pipeline, gpu);
  const torch::Tensor busy = torch::rand({2048, 2048}, torch::TensorOptions().device(gpu));
  std::vector<torch::Tensor> arrived;
  PipelineBatch b;
  while (feed.next(b)) {
    ASSERT_TRUE(b.images.is_cuda());
    // Work on the compute stream, so the copies of later batches (and the
    // pipeline's next buffers) are in flight while the host runs ahead.
    torch::Tensor t = busy;
    for (int i = 0; i < 4; ++i) t = torch::mm(t, busy).tanh();
    arrived.push_back(b.images.clone());
    feed.prefetch();
  }
  torch::cuda::synchronize();
  ASSERT_EQ(arrived.size(), expected.size());
  for (size_t i = 0; i < arrived.size(); ++i) {
    EXPECT_TRUE(torch::equal(arrived[i].cpu(), expected[i])) << "batch " << i;
  }
}

TEST(DeviceFeedCuda, APinnedPipelineHandsOutPinnedBatches) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  auto source = makeSyntheticSource(256, 3, 32, 32, 10, 1);
  PipelineOptions o;
  o.pinMemory = true;
  InputPipeline pipeline(source, ImageAugment{}, o, 1, 1, consecutiveBatches(4, 64));
  PipelineBatch b;
  int n = 0;
  while (pipeline.next(b)) {
    EXPECT_TRUE(b.images.is_pinned());
    EXPECT_TRUE(b.labels.is_pinned());
    ++n;
  }
  EXPECT_EQ(n, 4);
}

}  // namespace
}  // namespace bigbatch
