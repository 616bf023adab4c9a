// Per-sample augmentation of the input pipeline, from a decoded HWC uint8
// image to normalised float CHW: random resized crop (Szegedy et al. 2015,
// the torchvision form: area fraction in [scaleMin, scaleMax], log-uniform
// aspect ratio in [ratioMin, ratioMax], 10 tries then a centre crop), or
// pad-and-crop for small images; horizontal flip; bilinear resize (ATen's
// sampling positions, align_corners = false); per-channel normalisation —
// crop, resize, flip and normalise in one pass from 8-bit HWC to float CHW.
//
// Every random choice comes from one stream seeded by (seed, epoch, sample
// index) — never from thread identity, order or timing — so a sample's
// output is the same for any number of workers. Pure functions; thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "bigbatch/data/image_source.h"

namespace bigbatch {

struct ImageAugment {
  int64_t outHeight = 0;  // 0: the image's own size (no resize)
  int64_t outWidth = 0;
  bool randomResizedCrop = false;
  double scaleMin = 0.08, scaleMax = 1.0;           // crop area / image area
  double ratioMin = 3.0 / 4.0, ratioMax = 4.0 / 3.0;  // crop width / height
  // Evaluation's deterministic crop (without randomResizedCrop): > 0 takes
  // the centred region of this fraction of the shorter side, at the
  // output's aspect ratio, resized to the output — the usual "resize to
  // 256, centre-crop 224" is 0.875. 0: the whole image.
  double centerCrop = 0;
  int64_t padCrop = 0;  // zero-pad by this many pixels, crop back at a random offset
  bool flip = false;    // mirror left-right with probability 1/2
  // Per channel, on the 0..1 scale (one value: every channel); empty: 0 and 1.
  std::vector<float> mean, std;
};

// Where to crop, in the original image's pixels, and whether to flip.
struct CropPlan {
  double top = 0, left = 0, height = 0, width = 0;
  int64_t padDy = 0, padDx = 0;  // pad-and-crop offsets
  bool flip = false;
};

CropPlan planCrop(const ImageSize& original, const ImageAugment& a, uint64_t seed, int64_t epoch,
                  int64_t index);

// Output height and width for an image of `original` size.
ImageSize outputSize(const ImageSize& original, const ImageAugment& a);

// The region of `plan` in the pixels of an image decoded at `decoded` size
// from one of `original` size (a DCT-scaled or full decode): rounded and
// clamped as augmentInto crops, so the GPU path (data/gpu_jpeg_decoder.h)
// takes the same pixels.
struct CropRect {
  int64_t top = 0, left = 0, height = 0, width = 0;
};
CropRect cropRect(const ImageSize& decoded, const ImageSize& original, const CropPlan& plan);

// The per-channel normalisation as one multiply and add on 0..255 pixels:
// (x / 255 - mean) / std = x * scale + shift, in float, as augmentInto
// computes it (and the GPU path, so both give the same factors).
struct Normalisation {
  std::vector<float> scale, shift;  // one per channel
};
Normalisation normalisationOf(const ImageAugment& a, int64_t channels);

// Applies `plan` (original coordinates; `decoded` may be DCT-scaled from
// `original`) and writes the normalised CHW floats to `out` ([C, H, W] view
// of a batch slot).
void augmentInto(const Image& decoded, const ImageSize& original, const CropPlan& plan,
                 const ImageAugment& a, torch::Tensor out);

// The same crop, pad and resize into a uint8 [C, H, W] view `out`, the
// resized values rounded to the nearest 8-bit value — without the flip and
// the normalisation, which the consumer of a uint8 batch does
// (device_normalise.h). A whole image at its own size is copied as is.
void augmentBytesInto(const Image& decoded, const ImageSize& original, const CropPlan& plan,
                      const ImageAugment& a, torch::Tensor out);

}  // namespace bigbatch
