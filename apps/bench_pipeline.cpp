#include "bench_pipeline.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "bigbatch/common/error.h"
#include "bigbatch/data/dataset.h"
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
