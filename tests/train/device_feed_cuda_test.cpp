// The input's way to the GPU (CUDA build, label "cuda"): with
// PipelineOptions::pinMemory the pipeline's workers assemble batches in
// pinned memory, and DeviceFeed sends each to the device on its copy stream
// while the compute stream is busy. Every batch must arrive exactly as the
// CPU pipeline makes it — a pinned buffer the pool reused while its copy was
// still in flight would show here as a batch with another batch's pixels.
// And the copy stream must never write into device memory that a kernel
// queued on the compute stream still reads: the caching allocator reuses a
// block freed on a stream at once for that stream's next allocation, so a
// destination allocated on the compute stream, or one not marked used
// there, is written under the kernel (device_feed.h).
#include <ATen/cuda/Sleep.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include <chrono>

#include "bigbatch/data/image_source.h"
#include "bigbatch/data/input_pipeline.h"
#include "step/device_feed.h"

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

// A spin of about 0.2 s on the current stream (an H200 runs at ~2 GHz): long
// enough that the host, the pipeline and the copy stream all run far ahead
// of the kernels queued behind it.
void holdTheComputeStream() { at::cuda::sleep(400'000'000); }

// Whether the spin is still queued on the current stream. A call that
// synchronises the device inside the window (cudaHostAlloc may: a first
// pinned allocation did, on an H200) lets it finish, and then a test could
// not see the race it looks for, whatever the code under test does.
bool computeStreamStillBusy() {
  const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  return !impl.queryStream(impl.getStream(torch::Device(torch::kCUDA, 0)));
}

PipelineOptions pinnedOptions(bool pinned) {
  PipelineOptions o;
  o.pinMemory = pinned;
  return o;
}

// Four batches of 64 images of 3x64x64 (3 MiB each, the allocator's large
// pool), unflipped, fed to GPU 0 — and the same batches as the CPU
// pipeline makes them.
struct FeedCase {
  static constexpr int64_t kBatches = 4, kBatch = 64;
  std::shared_ptr<ImageSource> source = makeSyntheticSource(kBatches * kBatch, 3, 64, 64, 10, /*seed=*/3);
  std::vector<torch::Tensor> expected = cpuBatches();
  InputPipeline pipeline{source, ImageAugment{}, pinnedOptions(true), 1, 1,
                         consecutiveBatches(kBatches, kBatch)};
  train_detail::DeviceFeed feed{pipeline, torch::Device(torch::kCUDA, 0)};

  std::vector<torch::Tensor> cpuBatches() const {
    std::vector<torch::Tensor> out;
    InputPipeline cpu(source, ImageAugment{}, pinnedOptions(false), 1, 1,
                      consecutiveBatches(kBatches, kBatch));
    PipelineBatch b;
    while (cpu.next(b)) out.push_back(b.images.clone());
    return out;
  }
};

// The control: what the feed must avoid does happen on this device. A block
// freed on the compute stream while a queued kernel still reads it is handed
// to the next allocation on that stream, and a write from another stream
// lands before the read — were this not so, the two tests below could not
// fail.
TEST(DeviceFeedCuda, ControlAWriteFromAnotherStreamLandsUnderAKernelThatStillReadsAFreedBlock) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const torch::Device gpu(torch::kCUDA, 0);
  const auto options = torch::TensorOptions().device(gpu);
  torch::Tensor stale = torch::full({FeedCase::kBatch, 3, 64, 64}, -7.0f, options);
  // Everything that may synchronise the device is done before the window:
  // the pinned allocation did (visit 1), and so did something else the
  // window held in visit 3 — the side stream's first use creates the
  // stream pool, and its first copy the pinned block's event. So the side
  // stream is taken, and a copy made on it, before.
  const torch::Tensor ones = torch::ones({FeedCase::kBatch, 3, 64, 64}).pin_memory();
  const c10::impl::VirtualGuardImpl impl(gpu.type());
  const c10::Stream side = impl.getStreamFromGlobalPool(gpu);
  {
    const c10::StreamGuard onSide(side);
    torch::empty_like(stale).copy_(ones, /*non_blocking=*/true);
  }
  torch::cuda::synchronize();
  holdTheComputeStream();
  const torch::Tensor seen = stale.clone();  // queued behind the spin
  const void* freed = stale.data_ptr();
  stale.reset();
  torch::Tensor reused = torch::empty({FeedCase::kBatch, 3, 64, 64}, options);  // on the compute stream
  ASSERT_EQ(reused.data_ptr(), freed) << "the allocator did not hand out the freed block";
  ASSERT_TRUE(computeStreamStillBusy()) << "the device was synchronised before the side stream's copy";
  {
    const c10::StreamGuard onSide(side);
    reused.copy_(ones, /*non_blocking=*/true);
  }
  ASSERT_TRUE(computeStreamStillBusy()) << "the side stream's copy synchronised the device";
  torch::cuda::synchronize();
  EXPECT_FALSE(torch::equal(seen.cpu(), torch::full_like(seen.cpu(), -7.0f)))
      << "the side stream's write waited for the compute stream: this device would not show the race";
}

// The forward's case: prefetch() runs right after a forward is enqueued,
// when that forward's temporaries and workspaces are already freed on the
// compute stream but still read by its queued kernels.
TEST(DeviceFeedCuda, APrefetchNeverWritesIntoABlockThatAQueuedKernelStillReads) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  FeedCase c;
  const torch::Device gpu(torch::kCUDA, 0);
  PipelineBatch first;
  ASSERT_TRUE(c.feed.next(first));  // the steady state: one batch in use

  // A temporary of exactly a batch's size, read by a kernel queued behind
  // the spin, freed by the host before that kernel runs.
  torch::Tensor temporary = torch::full({FeedCase::kBatch, 3, 64, 64}, -7.0f, torch::TensorOptions().device(gpu));
  torch::cuda::synchronize();
  holdTheComputeStream();
  const torch::Tensor seen = temporary.clone();
  temporary.reset();
  c.feed.prefetch();  // the next batch's copy, now
  ASSERT_TRUE(computeStreamStillBusy()) << "the device was synchronised inside the window";

  PipelineBatch second;
  ASSERT_TRUE(c.feed.next(second));
  torch::cuda::synchronize();
  EXPECT_TRUE(torch::equal(seen.cpu(), torch::full_like(seen.cpu(), -7.0f)))
      << "the prefetch wrote into the block of a tensor a queued kernel was still reading";
  EXPECT_TRUE(torch::equal(first.images.cpu(), c.expected[0]));
  EXPECT_TRUE(torch::equal(second.images.cpu(), c.expected[1]));
}

// The accumulation case: the host drops the previous micro-batch when
// backward() returns, while its weight-gradient kernels may still read it;
// the next copy must not land in its block.
TEST(DeviceFeedCuda, AMicroBatchTheHostDroppedIsNotOverwrittenWhileAQueuedKernelReadsIt) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  FeedCase c;
  torch::Tensor seen;
  {
    PipelineBatch previous;
    ASSERT_TRUE(c.feed.next(previous));
    torch::cuda::synchronize();
    holdTheComputeStream();
    seen = previous.images.clone();  // "conv1's weight gradient", queued
  }  // the host drops the micro-batch
  c.feed.prefetch();
  ASSERT_TRUE(computeStreamStillBusy()) << "the device was synchronised inside the window";
  PipelineBatch next;
  ASSERT_TRUE(c.feed.next(next));
  torch::cuda::synchronize();
  EXPECT_TRUE(torch::equal(seen.cpu(), c.expected[0]))
      << "the next micro-batch's copy landed in the dropped one's block under a kernel still reading it";
  EXPECT_TRUE(torch::equal(next.images.cpu(), c.expected[1]));
}

// Issue 55: the destination is allocated like the pinned source, so a
// channels-last batch arrives channels-last, by one asynchronous copy from
// pinned memory. Allocated NCHW-contiguous (the old code), ATen re-laid the
// batch out on the host into pageable memory and copied from there: the
// batch arrived NCHW, and the host was held inside prefetch().
TEST(DeviceFeedCuda, AChannelsLastBatchArrivesChannelsLastAndPrefetchNeverWaitsForTheDevice) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t batches = 3, batch = 64;
  auto source = makeSyntheticSource(batches * batch, 3, 64, 64, 10, /*seed=*/5);
  PipelineOptions o;
  o.channelsLast = true;
  std::vector<torch::Tensor> expected;
  {
    InputPipeline cpu(source, ImageAugment{}, o, 1, 1, consecutiveBatches(batches, batch));
    PipelineBatch b;
    while (cpu.next(b)) expected.push_back(b.images.clone());
  }
  o.pinMemory = true;
  InputPipeline pipeline(source, ImageAugment{}, o, 1, 1, consecutiveBatches(batches, batch));
  train_detail::DeviceFeed feed(pipeline, torch::Device(torch::kCUDA, 0));
  PipelineBatch first;
  ASSERT_TRUE(feed.next(first));  // streams, pinned blocks and events exist from here on
  torch::cuda::synchronize();
  holdTheComputeStream();
  const auto t0 = std::chrono::steady_clock::now();
  feed.prefetch();
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(computeStreamStillBusy())
      << "prefetch() returned only after the compute stream drained (" << took << " s)";
  PipelineBatch second;
  ASSERT_TRUE(feed.next(second));
  EXPECT_TRUE(first.images.is_contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_TRUE(second.images.is_contiguous(at::MemoryFormat::ChannelsLast))
      << "strides " << c10::str(second.images.strides());
  torch::cuda::synchronize();
  EXPECT_TRUE(torch::equal(first.images.cpu(), expected[0]));
  EXPECT_TRUE(torch::equal(second.images.cpu(), expected[1]));
}

// uint8 pixels on the bus (PipelineOptions::uint8Batches): mirrored and
// normalised on the copy stream into the compute dtype, channels-last —
// the float pipeline's batch in that dtype, exactly (whole images: the
// same float multiply and add, each its own kernel).
TEST(DeviceFeedCuda, Uint8BatchesArriveAsTheFloatPipelinesBatchInTheComputeDtype) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t batches = 4, batch = 32;
  auto source = makeSyntheticSource(batches * batch, 3, 48, 40, 10, /*seed=*/9);
  ImageAugment augment;
  augment.flip = true;
  augment.mean = {0.485f, 0.456f, 0.406f};
  augment.std = {0.229f, 0.224f, 0.225f};
  PipelineOptions o;
  o.channelsLast = true;
  std::vector<torch::Tensor> expected;
  {
    InputPipeline cpu(source, augment, o, 1, 1, consecutiveBatches(batches, batch));
    PipelineBatch b;
    while (cpu.next(b)) expected.push_back(b.images.clone());
  }
  o.pinMemory = true;
  o.uint8Batches = true;
  for (const auto dtype : {torch::kFloat, torch::kHalf}) {
    InputPipeline pipeline(source, augment, o, 1, 1, consecutiveBatches(batches, batch));
    train_detail::DeviceFeed feed(pipeline, torch::Device(torch::kCUDA, 0), dtype);
    PipelineBatch b;
    size_t i = 0;
    while (feed.next(b)) {
      ASSERT_LT(i, expected.size());
      EXPECT_EQ(b.images.scalar_type(), dtype);
      EXPECT_FALSE(b.flips.defined());
      EXPECT_TRUE(b.images.is_contiguous(at::MemoryFormat::ChannelsLast));
      EXPECT_TRUE(torch::equal(b.images.cpu(), expected[i].to(dtype))) << "batch " << i;
      feed.prefetch();
      ++i;
    }
    EXPECT_EQ(i, expected.size());
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
