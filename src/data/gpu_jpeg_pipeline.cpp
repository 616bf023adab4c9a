#include "bigbatch/data/gpu_jpeg_pipeline.h"

#include <c10/core/StreamGuard.h>

#include "bigbatch/common/error.h"

namespace bigbatch {

GpuJpegPipeline::GpuJpegPipeline(const GpuDecodeSettings& settings,
                                 std::shared_ptr<const ImageSource> source, ImageAugment augment,
                                 uint64_t seed, int64_t epoch,
                                 std::vector<std::vector<int64_t>> batches)
    : settings_(settings),
      augment_(augment),
      reader_(std::move(source), std::move(augment), settings.reader, seed, epoch,
              std::move(batches)) {
  BIGBATCH_REQUIRE(settings_.decoder != nullptr, InvalidArgument, "GPU JPEG pipeline: no decoder");
}

bool GpuJpegPipeline::next(PipelineBatch& out, const c10::Stream& stream) {
  out = PipelineBatch{};
  JpegBatch host;
  if (!reader_.next(host)) return false;
  // What decode() takes with the bytes, kept for the labels and indices.
  std::vector<int64_t> index, label;
  for (const JpegSample& s : host.samples) {
    index.push_back(s.index);
    label.push_back(s.label);
  }
  out.skipped = host.skipped;
  GpuDecodedBatch d;
  if (!host.samples.empty()) {
    d = settings_.decoder->decode(std::move(host), augment_, settings_.dtype,
                                  settings_.channelsLast, stream);
  }
  for (const auto& [row, why] : d.failed) {
    reader_.skipBad(index[row], why);  // throws under data.bad_samples = "fail"
    ++out.skipped;
  }
  std::vector<int64_t> keptLabels;
  for (size_t row : d.kept) {
    out.indices.push_back(index[row]);
    keptLabels.push_back(label[row]);
  }
  if (keptLabels.empty()) return true;  // every sample skipped: an empty batch, as on the CPU
  out.images = d.images;
  // Labels from pinned memory on the same stream, after the images' work.
  const c10::StreamGuard onStream(stream);
  const torch::Tensor pinned = torch::tensor(keptLabels, torch::kInt64).pin_memory();
  out.labels = pinned.to(settings_.decoder->device(), /*non_blocking=*/true);
  return true;
}

PipelineStats GpuJpegPipeline::stats() const {
  PipelineStats s = reader_.stats();
  s.decoded = s.samples;  // every sample handed out was decoded on this path (no cache)
  return s;
}

}  // namespace bigbatch
