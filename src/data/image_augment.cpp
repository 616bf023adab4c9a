#include "bigbatch/data/image_augment.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "bigbatch/common/error.h"
#include "bigbatch/data/sampler.h"

namespace bigbatch {
namespace {

// A uniform double in [0, 1) from the next value of a splitmix64 stream.
double uniform(uint64_t& state) {
  state = splitmix64(state);
  return static_cast<double>(state >> 11) * (1.0 / 9007199254740992.0);
}

// The whole HWC image, flipped left-right or not, into the [C, H, W] view
// `out` as x * scale[c] + shift[c]. A flipped row is first reversed pixel
// by pixel into a small buffer, so both cases run the same loops. A
// channels-last slot is HWC like the pixels: each row is one contiguous run,
// normalised against a row of per-position factors (vectorised); a plain
// slot takes one plane at a time. Every element is the same float multiply
// and add in every branch, so the layouts agree bit for bit.
void normaliseWhole(const uint8_t* src, int64_t H, int64_t W, int64_t C, bool flip,
                    const float* scale, const float* shift, torch::Tensor& out) {
  float* dst = out.data_ptr<float>();
  const int64_t sc = out.stride(0), sy = out.stride(1), sx = out.stride(2);
  const int64_t row = W * C;
  std::vector<uint8_t> reversed(flip ? static_cast<size_t>(row) : 0);
  auto rowOf = [&](int64_t y) -> const uint8_t* {
    const uint8_t* in = src + y * row;
    if (!flip) return in;
    uint8_t* r = reversed.data();
    if (C == 3) {  // the pixel size spelled out: a loop over c would not be unrolled
      for (int64_t x = 0, j = row - 3; x < row; x += 3, j -= 3) {
        r[j] = in[x];
        r[j + 1] = in[x + 1];
        r[j + 2] = in[x + 2];
      }
    } else {
      for (int64_t x = 0; x < W; ++x) {
        for (int64_t c = 0; c < C; ++c) r[(W - 1 - x) * C + c] = in[x * C + c];
      }
    }
    return r;
  };
  if (sc == 1 && sx == C) {  // channels-last
    std::vector<float> m(static_cast<size_t>(row)), k(static_cast<size_t>(row));
    for (int64_t i = 0; i < row; ++i) {
      m[i] = scale[i % C];
      k[i] = shift[i % C];
    }
    const float* mp = m.data();
    const float* kp = k.data();
    for (int64_t y = 0; y < H; ++y) {
      const uint8_t* in = rowOf(y);
      float* o = dst + y * sy;
      for (int64_t i = 0; i < row; ++i) o[i] = static_cast<float>(in[i]) * mp[i] + kp[i];
    }
    return;
  }
  for (int64_t y = 0; y < H; ++y) {
    const uint8_t* in = rowOf(y);
    for (int64_t c = 0; c < C; ++c) {
      const float m = scale[c], k = shift[c];
      float* o = dst + c * sc + y * sy;
      for (int64_t x = 0; x < W; ++x) o[x * sx] = static_cast<float>(in[x * C + c]) * m + k;
    }
  }
}

}  // namespace

ImageSize outputSize(const ImageSize& original, const ImageAugment& a) {
  if (a.outHeight > 0 && a.outWidth > 0) return {a.outHeight, a.outWidth};
  return original;
}

CropPlan planCrop(const ImageSize& original, const ImageAugment& a, uint64_t seed, int64_t epoch,
                  int64_t index) {
  // The flip bit and the pad offsets are drawn as assembleBatch (batch.h)
  // draws them, so both give the same batch for the same sample.
  const uint64_t r0 = mixSeed(seed, static_cast<uint64_t>(epoch) + 1, static_cast<uint64_t>(index));
  uint64_t r = r0;
  CropPlan p;
  p.flip = a.flip && (r0 & 1);
  const double H = static_cast<double>(original.height), W = static_cast<double>(original.width);
  p.height = H;
  p.width = W;
  if (a.randomResizedCrop) {
    // torchvision's RandomResizedCrop.get_params, with our stream.
    const double area = H * W;
    const double logLo = std::log(a.ratioMin), logHi = std::log(a.ratioMax);
    bool found = false;
    for (int attempt = 0; attempt < 10 && !found; ++attempt) {
      const double target = area * (a.scaleMin + (a.scaleMax - a.scaleMin) * uniform(r));
      const double ratio = std::exp(logLo + (logHi - logLo) * uniform(r));
      const double w = std::round(std::sqrt(target * ratio));
      const double h = std::round(std::sqrt(target / ratio));
      if (w > 0 && h > 0 && w <= W && h <= H) {
        p.top = std::floor(uniform(r) * (H - h + 1));
        p.left = std::floor(uniform(r) * (W - w + 1));
        p.height = h;
        p.width = w;
        found = true;
      }
    }
    if (!found) {  // centre crop at the nearest allowed ratio
      const double in = W / H;
      double w = W, h = H;
      if (in < a.ratioMin) {
        h = std::round(w / a.ratioMin);
      } else if (in > a.ratioMax) {
        w = std::round(h * a.ratioMax);
      }
      p.top = std::floor((H - h) / 2);
      p.left = std::floor((W - w) / 2);
      p.height = h;
      p.width = w;
    }
  }
  if (!a.randomResizedCrop && a.centerCrop > 0) {
    const ImageSize out = outputSize(original, a);
    const double aspect = static_cast<double>(out.width) / static_cast<double>(out.height);
    double h = a.centerCrop * std::min(H, W / aspect);
    double w = h * aspect;
    h = std::max(1.0, std::round(h));
    w = std::max(1.0, std::min(W, std::round(w)));
    p.top = std::floor((H - h) / 2);
    p.left = std::floor((W - w) / 2);
    p.height = h;
    p.width = w;
  }
  if (a.padCrop > 0) {
    const int64_t span = 2 * a.padCrop + 1;
    r = splitmix64(r);
    p.padDy = static_cast<int64_t>(r % static_cast<uint64_t>(span)) - a.padCrop;
    p.padDx = static_cast<int64_t>((r >> 32) % static_cast<uint64_t>(span)) - a.padCrop;
  }
  return p;
}

namespace {

// Source coordinate and weight of each output position for a bilinear
// resize of `in` pixels to `out`, as ATen's upsample_bilinear2d computes
// them with align_corners = false (half-pixel centres, clamped at 0).
struct Tap {
  int64_t i0, i1;
  float w1;  // weight of i1; i0 gets 1 - w1
};

std::vector<Tap> bilinearTaps(int64_t in, int64_t out) {
  std::vector<Tap> taps(static_cast<size_t>(out));
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  for (int64_t o = 0; o < out; ++o) {
    float src = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(src), in - 1);
    const int64_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
    taps[o] = {i0, i1, src - static_cast<float>(i0)};
  }
  return taps;
}

// Crop + bilinear resize + flip + normalise, uint8 HWC -> float CHW, in one
// pass over the output. Why not ATen: libtorch 1.13's upsample_bilinear2d has
// no uint8 kernel, so the ATen route converts the whole crop (up to the full
// image) to float first, then resizes, flips (a copy) and normalises (two
// more passes) — measured as half of the pipeline's CPU time, as much as the
// JPEG decode. This loop reads each source pixel it needs once and writes
// each output value once. Tested against the ATen route
// (InputPipeline.FusedResizeMatchesAten).
void resizeNormalise(const uint8_t* img, int64_t W, int64_t C, int64_t top, int64_t left,
                     int64_t h, int64_t w, bool flip, const float* scale, const float* shift,
                     torch::Tensor out) {
  const int64_t oh = out.size(1), ow = out.size(2);
  const auto ys = bilinearTaps(h, oh);
  auto xs = bilinearTaps(w, ow);
  // A flip reverses the horizontal taps, so every write below is contiguous.
  if (flip) std::reverse(xs.begin(), xs.end());
  float* dst = out.data_ptr<float>();
  const int64_t sc = out.stride(0), sy = out.stride(1), sx = out.stride(2);
  // Horizontally resampled source rows, planar ([C][ow]), cached by source
  // row: enlarging crops reuse each row for several output rows.
  std::vector<float> rows[2] = {std::vector<float>(static_cast<size_t>(C * ow)),
                                std::vector<float>(static_cast<size_t>(C * ow))};
  int64_t rowOf[2] = {-1, -1};
  auto resampled = [&](int64_t y) -> const float* {
    for (int k = 0; k < 2; ++k) {
      if (rowOf[k] == y) return rows[k].data();
    }
    const int k = rowOf[0] == -1 || (rowOf[1] != -1 && rowOf[0] < rowOf[1]) ? 0 : 1;
    const uint8_t* r = img + ((top + y) * W + left) * C;
    float* dstRow = rows[k].data();
    if (C == 3) {
      for (int64_t ox = 0; ox < ow; ++ox) {
        const Tap& t = xs[ox];
        const uint8_t* p0 = r + t.i0 * 3;
        const uint8_t* p1 = r + t.i1 * 3;
        const float b = t.w1, a = 1.f - b;
        dstRow[ox] = a * p0[0] + b * p1[0];
        dstRow[ow + ox] = a * p0[1] + b * p1[1];
        dstRow[2 * ow + ox] = a * p0[2] + b * p1[2];
      }
    } else {
      for (int64_t ox = 0; ox < ow; ++ox) {
        const Tap& t = xs[ox];
        const float b = t.w1, a = 1.f - b;
        for (int64_t c = 0; c < C; ++c) {
          dstRow[c * ow + ox] = a * r[t.i0 * C + c] + b * r[t.i1 * C + c];
        }
      }
    }
    rowOf[k] = y;
    return dstRow;
  };
  for (int64_t oy = 0; oy < oh; ++oy) {
    const Tap& ty = ys[oy];
    const float* r0 = resampled(ty.i0);
    const float* r1 = resampled(ty.i1);
    const float b = ty.w1, a = 1.f - b;
    for (int64_t c = 0; c < C; ++c) {
      const float* x0 = r0 + c * ow;
      const float* x1 = r1 + c * ow;
      const float m = scale[c], k = shift[c];
      float* o = dst + c * sc + oy * sy;
      if (sx == 1) {
        for (int64_t ox = 0; ox < ow; ++ox) o[ox] = (a * x0[ox] + b * x1[ox]) * m + k;
      } else {  // channels-last batch: strided writes
        for (int64_t ox = 0; ox < ow; ++ox) o[ox * sx] = (a * x0[ox] + b * x1[ox]) * m + k;
      }
    }
  }
}

}  // namespace

Normalisation normalisationOf(const ImageAugment& a, int64_t channels) {
  // (x / 255 - mean) / std = x * (1 / (255 std)) - mean / std, per channel.
  Normalisation n;
  n.scale.resize(static_cast<size_t>(channels));
  n.shift.resize(static_cast<size_t>(channels));
  for (int64_t c = 0; c < channels; ++c) {
    const float m = a.mean.empty() ? 0.f : a.mean[a.mean.size() == 1 ? 0 : c];
    const float s = a.std.empty() ? 1.f : a.std[a.std.size() == 1 ? 0 : c];
    n.scale[c] = 1.f / (255.f * s);
    n.shift[c] = -m / s;
  }
  return n;
}

CropRect cropRect(const ImageSize& decoded, const ImageSize& original, const CropPlan& plan) {
  // The plan is in original pixels; the decode may have been DCT-scaled.
  const int64_t H = decoded.height, W = decoded.width;
  const double sy = static_cast<double>(H) / static_cast<double>(original.height);
  const double sx = static_cast<double>(W) / static_cast<double>(original.width);
  CropRect r;
  r.top = std::clamp<int64_t>(std::llround(plan.top * sy), 0, H - 1);
  r.left = std::clamp<int64_t>(std::llround(plan.left * sx), 0, W - 1);
  r.height = std::clamp<int64_t>(std::llround(plan.height * sy), 1, H - r.top);
  r.width = std::clamp<int64_t>(std::llround(plan.width * sx), 1, W - r.left);
  return r;
}

namespace {

// augmentInto with the per-channel factors given: x * scale[c] + shift[c].
void augmentWith(const Image& decoded, const ImageSize& original, const CropPlan& plan,
                 const ImageAugment& a, std::vector<float>& scale, std::vector<float>& shift,
                 torch::Tensor out) {
  const int64_t C = decoded.channels, H = decoded.height, W = decoded.width;
  const CropRect r = cropRect({H, W}, original, plan);
  const int64_t top = r.top, left = r.left, h = r.height, w = r.width;
  if (a.padCrop == 0 && out.scalar_type() == torch::kFloat && h == H && w == W &&
      out.size(1) == H && out.size(2) == W) {
    // The whole image at its own size (Fashion-MNIST, synthetic data):
    // flip and normalise only, the hot path of the trainer's pipeline.
    normaliseWhole(decoded.pixels.data(), H, W, C, plan.flip, scale.data(), shift.data(), out);
    return;
  }
  if (a.padCrop == 0 && out.scalar_type() == torch::kFloat) {
    resizeNormalise(decoded.pixels.data(), W, C, top, left, h, w, plan.flip, scale.data(),
                    shift.data(), out);
    return;
  }
  // Pad-and-crop (small images): the ATen route.
  torch::Tensor img =
      torch::from_blob(const_cast<uint8_t*>(decoded.pixels.data()), {H, W, C}, torch::kUInt8);
  torch::Tensor t = img.slice(0, top, top + h).slice(1, left, left + w).permute({2, 0, 1});
  t = t.to(torch::kFloat).unsqueeze(0);  // [1, C, h, w]
  if (a.padCrop > 0) {
    const int64_t p = a.padCrop;
    t = torch::constant_pad_nd(t, {p, p, p, p}, 0.0)
            .slice(2, p + plan.padDy, p + plan.padDy + h)
            .slice(3, p + plan.padDx, p + plan.padDx + w);
  }
  const int64_t oh = out.size(1), ow = out.size(2);
  if (oh != t.size(2) || ow != t.size(3)) {
    t = at::upsample_bilinear2d(t, {oh, ow}, /*align_corners=*/false);
  }
  if (plan.flip) t = t.flip({3});
  const torch::Tensor scaleT = torch::from_blob(scale.data(), {C, 1, 1}, torch::kFloat);
  const torch::Tensor shiftT = torch::from_blob(shift.data(), {C, 1, 1}, torch::kFloat);
  out.copy_(t.squeeze(0).mul_(scaleT).add_(shiftT));
}

}  // namespace

void augmentInto(const Image& decoded, const ImageSize& original, const CropPlan& plan,
                 const ImageAugment& a, torch::Tensor out) {
  const int64_t C = decoded.channels;
  BIGBATCH_REQUIRE(out.dim() == 3 && out.size(0) == C, InvalidArgument,
                   "augment: output slot {} for a {}-channel image", c10::str(out.sizes()), C);
  Normalisation n = normalisationOf(a, C);
  augmentWith(decoded, original, plan, a, n.scale, n.shift, out);
}

void augmentBytesInto(const Image& decoded, const ImageSize& original, const CropPlan& plan,
                      const ImageAugment& a, torch::Tensor out) {
  const int64_t C = decoded.channels, H = decoded.height, W = decoded.width;
  BIGBATCH_REQUIRE(out.dim() == 3 && out.size(0) == C && out.scalar_type() == torch::kUInt8,
                   InvalidArgument, "augment: uint8 output slot {} ({}) for a {}-channel image",
                   c10::str(out.sizes()), std::string(out.dtype().name()), C);
  const CropRect r = cropRect({H, W}, original, plan);
  if (a.padCrop == 0 && r.height == H && r.width == W && out.size(1) == H && out.size(2) == W) {
    // The whole image at its own size: the pixels as they are (HWC into
    // the slot's strides; one run per row in a channels-last slot).
    const torch::Tensor hwc =
        torch::from_blob(const_cast<uint8_t*>(decoded.pixels.data()), {H, W, C}, torch::kUInt8);
    out.copy_(hwc.permute({2, 0, 1}));
    return;
  }
  // Crop, pad and resize as the float path does, unflipped and with the
  // factors 1 and 0, then to the nearest 8-bit value.
  CropPlan unflipped = plan;
  unflipped.flip = false;
  std::vector<float> one(static_cast<size_t>(C), 1.f), zero(static_cast<size_t>(C), 0.f);
  torch::Tensor values = torch::empty(out.sizes(), torch::kFloat);
  augmentWith(decoded, original, unflipped, a, one, zero, values);
  out.copy_(values.round_().clamp_(0, 255));
}

}  // namespace bigbatch
