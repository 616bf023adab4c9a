// The codecs behind bigbatch_torch.hooks: a DDP comm hook's bucket through
// bigbatch's own gradient codecs (src/ddp/gradient_codec.h) — the 16-bit
// wire (half_codec.h: pre-divided by the world size, summed in 16 bits,
// widened back), or PowerSGD (powersgd_codec.h: error feedback, warm start,
// its orthogonalisation, its rules for vectors and small matrices) — as
// `bigbatch train` runs them on its own buckets.
//
// DDP numbers its buckets and changes their layout once, when it rebuilds
// them after the first iteration (and a new DDP in a resumed script starts
// from its first layout again). So a codec is made per (hook, bucket
// index) from the bucket's parameters, but its state — PowerSGD's Q and
// error memory — is kept by parameter name: when any bucket comes with a
// new layout (a rebuild), every codec of the hook gives its state back to
// a pool, and each bucket's new codec takes its parameters' entries from
// it (whichever bucket held them before); a loaded state waits there the
// same way. With the parameters' own names (the hook state made with the
// module) a checkpointed script resumes exactly, whatever DDP's bucketing;
// with positional names ("b<bucket>.<i>") only where the layout of the
// saved bucket comes back. The step count is the hook's (bucket 0 opens a
// step: DDP hands its buckets over in index order), given to each codec it
// makes.
//
// Threading: add(), wireCodec() and check() from any thread; the rest on
// the communication thread only (ProcessGroupBigbatch runs them there).
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/ddp/distributed_data_parallel.h"

namespace bigbatch::ddp_detail {
class GradientCodec;
class WireSum;
}  // namespace bigbatch::ddp_detail

namespace bigbatch::torch_backend {

// One parameter's gradient in a DDP bucket's flat buffer.
struct BucketSlot {
  int64_t offset = 0;  // elements from the buffer's start
  int64_t numel = 0;
  std::vector<int64_t> shape;
  std::string name;  // the parameter's name (its state's key)
};

struct CodecSpec {
  DataType wireType = DataType::kFloat32;  // fp16/bf16: the 16-bit wire (also PowerSGD's factors)
  bool powerSgd = false;
  PowerSgdOptions powerSgdOptions;
};

class CodecRegistry {
 public:
  using NamedState = std::vector<std::pair<std::string, torch::Tensor>>;
  CodecRegistry();
  ~CodecRegistry();

  // A new hook's codecs; returns its id.
  int add(const CodecSpec& spec);
  // The 16-bit wire's codec (fp16 or bf16), made at its first call: one id
  // per wire for the group's life, the same on every rank that asks in the
  // same order.
  int wireCodec(DataType wire);
  // InvalidArgument unless `codec` was added (from any thread).
  void check(int codec) const;
  // Leaves the bucket's mean over the ranks (float32 `data`, `numel`
  // elements laid out as `slots`), exchanged through `wire`, in place.
  void exchange(int codec, int64_t bucket, const std::vector<BucketSlot>& slots, float* data,
                int64_t numel, ddp_detail::WireSum& wire, int worldSize);
  NamedState state(int codec) const;
  void loadState(int codec, const NamedState& state);

 private:
  struct BucketCodec {
    std::vector<BucketSlot> slots;
    std::unique_ptr<ddp_detail::GradientCodec> codec;
  };
  struct Hook {
    CodecSpec spec;
    std::map<int64_t, BucketCodec> buckets;
    std::map<std::string, torch::Tensor> pool;  // state no codec holds: loaded, or of an old layout
    int64_t steps = 0;  // steps opened (bucket 0's calls), and loaded
  };
  // Moves `b`'s state into the pool.
  static void retire(Hook& h, BucketCodec& b);
  // Gives `b` its parameters' entries from the pool (and the step count).
  static void adopt(Hook& h, BucketCodec& b);
  Hook& hook(int codec);
  const Hook& hook(int codec) const;

  mutable std::mutex addMutex_;  // guards hooks_'s growth and wireCodecs_
  std::vector<std::unique_ptr<Hook>> hooks_;
  std::map<DataType, int> wireCodecs_;
};

}  // namespace bigbatch::torch_backend
