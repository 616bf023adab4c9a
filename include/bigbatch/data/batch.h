// Assembles a training or evaluation batch from a Dataset: uint8 -> float,
// normalise, and the augmentations of the small-image recipes (random
// horizontal flip, pad-and-crop), all in one pass over the pixels.
//
// The augmentation of a sample depends only on (seed, epoch, sample index),
// never on batch composition, thread count or timing. Thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "bigbatch/data/dataset.h"

namespace bigbatch {

struct AugmentOptions {
  bool flip = false;   // mirror left-right with probability 1/2
  int64_t padCrop = 0; // zero-pad by this many pixels, then crop back at a random offset
};

struct Batch {
  torch::Tensor images;  // float [B, C, H, W], normalised
  torch::Tensor labels;  // int64 [B]
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

Batch assembleBatch(const Dataset& data, const std::vector<int64_t>& indices,
                    const AugmentOptions& augment, uint64_t seed, int64_t epoch,
                    bool channelsLast);

}  // namespace bigbatch
