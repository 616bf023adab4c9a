// Test accuracy of a model, sharded over the ranks: rank r evaluates the
// r-th contiguous slice of the test set and the trainer sums the hits.
// Internal to src/train; call from the thread that owns the model.
#pragma once

#include <cstdint>

#include "bigbatch/amp/precision.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/models/model_options.h"

namespace bigbatch::train_detail {

// Correct top-1 predictions of `model` (in eval mode, BatchNorm on its
// running statistics; back in train mode after) on this rank's shard of
// `data`, in chunks of `batch` images.
int64_t evaluateShard(ImageClassifierImpl& model, const Dataset& data, int64_t batch,
                      bool channelsLast, Precision precision, int rank, int worldSize);

}  // namespace bigbatch::train_detail
