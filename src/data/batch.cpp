#include "bigbatch/data/batch.h"

#include "bigbatch/data/sampler.h"

namespace bigbatch {

Batch assembleBatch(const Dataset& data, const std::vector<int64_t>& indices,
                    const AugmentOptions& augment, uint64_t seed, int64_t epoch,
                    bool channelsLast) {
  const int64_t n = static_cast<int64_t>(indices.size());
  const int64_t c = data.images.size(1), h = data.images.size(2), w = data.images.size(3);
  torch::Tensor images = torch::empty({n, c, h, w}, torch::kFloat32);
  torch::Tensor labels = torch::empty({n}, torch::kInt64);
  const uint8_t* src = data.images.data_ptr<uint8_t>();
  const int64_t* srcLabels = data.labels.data_ptr<int64_t>();
  float* dst = images.data_ptr<float>();
  int64_t* dstLabels = labels.data_ptr<int64_t>();
  const float scale = 1.f / (255.f * data.std);
  const float shift = -data.mean / data.std;
  const float padValue = shift;  // a zero pixel, normalised
  const int64_t p = augment.padCrop;
  for (int64_t b = 0; b < n; ++b) {
    const int64_t idx = indices[b];
    dstLabels[b] = srcLabels[idx];
    uint64_t r = mixSeed(seed, static_cast<uint64_t>(epoch) + 1, static_cast<uint64_t>(idx));
    const bool flip = augment.flip && (r & 1);
    int64_t dy = 0, dx = 0;  // crop offset relative to the unpadded image
    if (p > 0) {
      r = splitmix64(r);
      dy = static_cast<int64_t>(r % (2 * p + 1)) - p;
      dx = static_cast<int64_t>((r >> 32) % (2 * p + 1)) - p;
    }
    for (int64_t ch = 0; ch < c; ++ch) {
      const uint8_t* in = src + ((idx * c + ch) * h) * w;
      float* out = dst + ((b * c + ch) * h) * w;
      for (int64_t y = 0; y < h; ++y) {
        const int64_t sy = y + dy;
        for (int64_t x = 0; x < w; ++x) {
          const int64_t xx = flip ? w - 1 - x : x;
          const int64_t sx = xx + dx;
          out[y * w + x] = (sy < 0 || sy >= h || sx < 0 || sx >= w)
                               ? padValue
                               : static_cast<float>(in[sy * w + sx]) * scale + shift;
        }
      }
    }
  }
  if (channelsLast && c > 1) images = images.contiguous(at::MemoryFormat::ChannelsLast);
  return {images, labels};
}

}  // namespace bigbatch
