#include "bench_pipeline.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>

#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bigbatch/common/error.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/gpu_jpeg_pipeline.h"
#include "bigbatch/data/input_pipeline.h"
#include "bigbatch/data/sampler.h"

namespace bigbatch {
namespace {

double cpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// --decode gpu: the GPU decode path on cuda:0 — host readers, nvJPEG, the
// crop-resize kernel — each epoch timed to the end of its last batch's
// device work. Batches are dropped as they arrive (the caching allocator
// reuses their memory in stream order).
int runGpuDecode(const BenchPipelineOptions& o, std::shared_ptr<ImageSource> source,
                 const ImageAugment& a) {
  const torch::Device device(torch::kCUDA, 0);
  GpuDecodeSettings g;
  g.decoder = std::make_shared<GpuJpegDecoder>(device);  // refuses, naming the fix, where it cannot
  g.reader.readThreads = o.workers;
  g.reader.prefetchBatches = o.prefetch;
  g.dtype = torch::kBFloat16;
  g.channelsLast = true;
  const c10::impl::VirtualGuardImpl impl(device.type());
  const c10::Stream stream = impl.getStreamFromGlobalPool(device);
  if (!o.json) {
    fmt::print("{} images ({}), GPU decode: {}; {} host reader thread(s), {}x{} crops into "
               "bfloat16 channels-last batches of {}\n",
               source->size(), o.dir, g.decoder->backend(), o.workers, o.size, o.size, o.batch);
    fmt::print("{:>5} {:>7} {:>8} {:>9} {:>8} {:>12} {:>8}\n", "epoch", "images", "seconds",
               "img/s", "cpu_s", "img/cpu_s", "skipped");
  }
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    const double c0 = cpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    const ShardPlan plan = planEpoch(source->size(), o.batch, 0, 1, 1, epoch);
    int64_t images = 0;
    PipelineStats stats;
    {
      GpuJpegPipeline pipeline(g, source, a, 1, epoch, plan.batches);
      PipelineBatch b;
      while (pipeline.next(b, stream)) images += b.size();
      stream.synchronize();  // the last batch's device work, inside the timing
      stats = pipeline.stats();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = cpuSeconds() - c0;
    const GpuDecodeCounts n = g.decoder->counts();
    if (o.json) {
      nlohmann::ordered_json j{{"impl", "bigbatch-gpu"},
                               {"source", "decoded"},
                               {"epoch", epoch},
                               {"workers", o.workers},
                               {"images", images},
                               {"seconds", seconds},
                               {"img_s", images / seconds},
                               {"cpu_s", cpu},
                               {"img_per_cpu_s", images / cpu},
                               {"cpu_ms_per_img", 1e3 * cpu / std::max<int64_t>(images, 1)},
                               {"skipped", stats.skipped},
                               {"backend", g.decoder->backend()},
                               {"decoded_hardware", n.hardware},
                               {"decoded_cuda", n.cuda},
                               {"decoded_host", n.host},
                               {"decoded_region", n.region}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      fmt::print("{:>5} {:>7} {:>8.3f} {:>9.1f} {:>8.3f} {:>12.1f} {:>8}\n", epoch, images, seconds,
                 images / seconds, cpu, images / cpu, stats.skipped);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int runBenchPipeline(const BenchPipelineOptions& o) {
  BIGBATCH_REQUIRE(o.workers >= 1 && o.size >= 1 && o.batch >= 1 && o.epochs >= 1, InvalidArgument,
                   "bench pipeline: --workers, --size, --batch and --epochs must be >= 1");
  // Each worker runs its ATen calls on its own thread (no intra-op pool), so
  // one worker is one core, as a DataLoader worker process is.
  torch::set_num_threads(1);
  BIGBATCH_REQUIRE(!(o.inMemory && !o.dir.empty()), InvalidArgument,
                   "bench pipeline: --in-memory makes its own images; drop --dir or --in-memory");
  std::shared_ptr<ImageSource> source;
  if (o.inMemory) {
    // What data.dataset = "synthetic" and Fashion-MNIST feed the trainer:
    // uint8 planes in memory, whole images, flipped and normalised into
    // channels-last batches.
    source = makeIdxSource(makeSyntheticDataset(2048, 3, o.size, o.size, 10, 1));
  } else if (o.dir.empty()) {
    source = makeSyntheticSource(2000, 3, 375, 500, 10, 1);
  } else {
    source = makeImageFolderSource(o.dir);
  }
  ImageAugment a;
  if (!o.inMemory) {
    a.outHeight = a.outWidth = o.size;
    a.randomResizedCrop = true;
  }
  a.flip = true;
  a.mean = {0.485f, 0.456f, 0.406f};
  a.std = {0.229f, 0.224f, 0.225f};
  if (o.decode == "gpu") {
    BIGBATCH_REQUIRE(!o.dir.empty() && o.cacheMb == 0, InvalidArgument,
                     "bench pipeline --decode gpu decodes a folder of JPEGs: give --dir ROOT "
                     "(bench/make_jpeg_folder.py writes one), and no --cache-mb");
    return runGpuDecode(o, source, a);
  }
  PipelineOptions p;
  p.readThreads = 1;
  p.decodeThreads = o.workers;
  p.augmentThreads = o.workers;
  p.prefetchBatches = o.prefetch;
  p.channelsLast = o.inMemory;
  std::shared_ptr<DecodedCache> cache;
  if (o.cacheMb > 0) cache = std::make_shared<DecodedCache>(source->size(), o.cacheMb << 20, 256);
  if (!o.json) {
    fmt::print("{} images ({}), {} decode + {} augment + 1 read thread(s), {}x{} {}, batch {}\n",
               source->size(),
               o.inMemory      ? "in memory"
               : o.dir.empty() ? "synthetic JPEG-sized"
                               : o.dir,
               o.workers, o.workers, o.size, o.size, o.inMemory ? "whole images" : "crops",
               o.batch);
    fmt::print("{:>5} {:>7} {:>8} {:>9} {:>8} {:>12} {:>8}\n", "epoch", "images", "seconds",
               "img/s", "cpu_s", "img/cpu_s", "skipped");
  }
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    const double c0 = cpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    const ShardPlan plan = planEpoch(source->size(), o.batch, 0, 1, 1, epoch);
    int64_t images = 0;
    PipelineStats stats;
    {
      InputPipeline pipeline(source, a, p, 1, epoch, plan.batches, cache);
      PipelineBatch b;
      while (pipeline.next(b)) images += b.size();
      stats = pipeline.stats();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = cpuSeconds() - c0;
    if (o.json) {
      nlohmann::ordered_json j{{"impl", "bigbatch"},
                               {"source", o.inMemory ? "in-memory" : "decoded"},
                               {"epoch", epoch},
                               {"workers", o.workers},
                               {"images", images},
                               {"seconds", seconds},
                               {"img_s", images / seconds},
                               {"cpu_s", cpu},
                               {"img_per_cpu_s", images / cpu},
                               {"skipped", stats.skipped},
                               {"cache_hits", stats.cacheHits}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      fmt::print("{:>5} {:>7} {:>8.3f} {:>9.1f} {:>8.3f} {:>12.1f} {:>8}\n", epoch, images, seconds,
                 images / seconds, cpu, images / cpu, stats.skipped);
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace bigbatch
