// PowerSgdPlan: what PowerSGD (Vogels et al. 2019) does with a model's
// gradients, whichever memory it runs in — which gradient matrices it
// compresses and at what rank, how Q is drawn, the bytes it sends, and the
// names of its state in a checkpoint. The host codec (powersgd_codec.h)
// and the device codec (device_powersgd_codec.h) share it, so both refuse
// the same settings in the same words, send the same bytes, and a
// checkpoint written by one resumes on the other.
//
// Threading: plain functions of their arguments. Internal to src/ddp.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/ddp/bucket_layout.h"
#include "bigbatch/ddp/distributed_data_parallel.h"

namespace bigbatch::ddp_detail {

// One parameter's gradient as PowerSGD sees it: a rows x cols matrix (rows
// = its first dimension, cols = the rest: a conv's out x in*kh*kw) and the
// rank of its factors — 0 when it goes uncompressed (a vector, or a matrix
// whose factors would not pay: (rows + cols) r * minCompressionRate >
// rows cols, r = min(rank, rows, cols)).
struct LowRankShape {
  int64_t rows = 0, cols = 0;
  int rank = 0;
};

// Per parameter, in registration order. Throws InvalidArgument naming
// ddp.powersgd_rank when it is below 1 or compresses none of `params`
// (with the largest rank that would compress one).
std::vector<LowRankShape> planLowRank(const PowerSgdOptions& options,
                                      const std::vector<torch::Tensor>& params);
// Whether `options` compresses any of `params` (planLowRank would not
// throw for it): a DDP bucket of vectors only goes uncompressed.
bool compressesAny(const PowerSgdOptions& options, const std::vector<torch::Tensor>& params);

// Parameter `param`'s Q (cols x rank, float, on the CPU) for `step`: the
// same on every rank (a seed of parameter and step; warm start draws once,
// at step 0).
torch::Tensor drawQ(size_t param, const LowRankShape& shape, int64_t step);

// Bytes of `bucket` on the wire once compression has started: the factors
// of its compressed gradients and its other values as they are.
int64_t lowRankWireBytes(const std::vector<LowRankShape>& plan, const Bucket& bucket,
                         DataType wireType);

// The names of the state (state()/loadState() of both codecs):
// "powersgd/steps" (the synced steps exchanged), "powersgd/q/<parameter>"
// (its Q, cols x rank) and "powersgd/error/<parameter>" (this rank's
// error memory, rows x cols).
inline constexpr const char* kPowerSgdStepsKey = "powersgd/steps";
std::string powerSgdQKey(const std::string& name);
std::string powerSgdErrorKey(const std::string& name);

// Where a checkpoint's PowerSGD tensor `key` of `value`'s shape goes.
// Throws InvalidArgument naming the key when it names no compressed
// parameter or its shape is not this plan's (another ddp.powersgd_rank).
struct PowerSgdSlot {
  size_t param = 0;
  bool isQ = false;  // else the error memory
};
PowerSgdSlot locatePowerSgdState(const std::string& key, const torch::Tensor& value,
                                 const std::vector<std::string>& names,
                                 const std::vector<LowRankShape>& plan);

}  // namespace bigbatch::ddp_detail
