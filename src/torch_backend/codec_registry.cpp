#include "codec_registry.h"

#include <fmt/format.h>

#include "bigbatch/common/error.h"
#include "gradient_codec.h"
#include "powersgd_plan.h"

namespace bigbatch::torch_backend {
namespace {

bool sameLayout(const std::vector<BucketSlot>& a, const std::vector<BucketSlot>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].offset != b[i].offset || a[i].numel != b[i].numel || a[i].shape != b[i].shape ||
        a[i].name != b[i].name) {
      return false;
    }
  }
  return true;
}

// The parameter name a state key is about ("powersgd/q/NAME"); "" for the
// step count.
std::string paramOf(const std::string& key) {
  const size_t slash = key.find('/', key.find('/') + 1);
  return key == ddp_detail::kPowerSgdStepsKey || slash == std::string::npos
             ? std::string()
             : key.substr(slash + 1);
}

}  // namespace

CodecRegistry::CodecRegistry() = default;
CodecRegistry::~CodecRegistry() = default;

int CodecRegistry::add(const CodecSpec& spec) {
  const std::lock_guard<std::mutex> lock(addMutex_);
  hooks_.push_back(std::make_unique<Hook>());
  hooks_.back()->spec = spec;
  return static_cast<int>(hooks_.size()) - 1;
}

int CodecRegistry::wireCodec(DataType wire) {
  BIGBATCH_REQUIRE(wire == DataType::kFloat16 || wire == DataType::kBFloat16, InvalidArgument,
                   "a 16-bit wire codec of {}: fp16 or bf16", dataTypeName(wire));
  {
    const std::lock_guard<std::mutex> lock(addMutex_);
    if (auto it = wireCodecs_.find(wire); it != wireCodecs_.end()) return it->second;
  }
  CodecSpec spec;
  spec.wireType = wire;
  const int id = add(spec);
  const std::lock_guard<std::mutex> lock(addMutex_);
  // Two threads asking at once: the first id stays (the other is unused).
  return wireCodecs_.emplace(wire, id).first->second;
}

void CodecRegistry::check(int codec) const {
  const std::lock_guard<std::mutex> lock(addMutex_);
  BIGBATCH_REQUIRE(codec >= 0 && codec < static_cast<int>(hooks_.size()), InvalidArgument,
                   "no bigbatch comm hook {} on this process group; make the hook's state "
                   "with bigbatch_torch.hooks on the group DDP uses",
                   codec);
}

CodecRegistry::Hook& CodecRegistry::hook(int codec) {
  check(codec);
  const std::lock_guard<std::mutex> lock(addMutex_);
  return *hooks_[static_cast<size_t>(codec)];
}

const CodecRegistry::Hook& CodecRegistry::hook(int codec) const {
  return const_cast<CodecRegistry*>(this)->hook(codec);
}

void CodecRegistry::retire(Hook& h, BucketCodec& b) {
  if (!b.codec) return;
  for (auto& [key, value] : b.codec->state()) {
    // A tensor named by its place in a bucket ("#b<bucket>.<i>": the hook
    // was given no module) names another tensor once the layout changed:
    // its state is dropped, never handed to whichever tensor is there now.
    if (key == ddp_detail::kPowerSgdStepsKey || paramOf(key).rfind('#', 0) == 0) continue;
    h.pool[key] = value;
  }
  b.codec.reset();
}

void CodecRegistry::adopt(Hook& h, BucketCodec& b) {
  NamedState mine;
  for (const BucketSlot& slot : b.slots) {
    for (auto it = h.pool.begin(); it != h.pool.end();) {
      if (paramOf(it->first) == slot.name) {
        mine.emplace_back(it->first, it->second);
        it = h.pool.erase(it);
      } else {
        ++it;
      }
    }
  }
  // The steps before this one: the codec counts this one as it exchanges.
  if (h.spec.powerSgd) {
    mine.emplace_back(ddp_detail::kPowerSgdStepsKey, torch::tensor({h.steps - 1}, torch::kLong));
  }
  if (!mine.empty()) b.codec->loadState(mine);
}

void CodecRegistry::exchange(int codec, int64_t bucket, const std::vector<BucketSlot>& slots,
                             float* data, int64_t numel, ddp_detail::WireSum& wire,
                             int worldSize) {
  Hook& h = hook(codec);
  // DDP hands its buckets over in index order: bucket 0 opens a step.
  if (bucket == 0) ++h.steps;
  BucketCodec& b = h.buckets[bucket];
  if (!b.codec || !sameLayout(b.slots, slots)) {
    // A rebuild moves parameters between buckets (and may drop bucket
    // indices): every codec's state back to the pool, so that each bucket
    // finds its parameters' entries whichever bucket held them; a bucket
    // whose layout did not change gets its own state back at its turn.
    bool moved = b.codec != nullptr;
    for (const auto& [index, other] : h.buckets) {
      for (size_t i = 0; !moved && other.codec && i < other.slots.size(); ++i) {
        for (const BucketSlot& slot : slots) moved = moved || other.slots[i].name == slot.name;
      }
    }
    if (moved) {
      for (auto& [index, other] : h.buckets) retire(h, other);
    }
    std::vector<torch::Tensor> shapes;
    std::vector<std::string> names;
    for (const BucketSlot& slot : slots) {
      shapes.push_back(torch::zeros(slot.shape));
      names.push_back(slot.name);
    }
    DdpOptions options;
    options.exchangeType = h.spec.wireType;
    // A bucket of vectors and small matrices only (PowerSGD would compress
    // none of it) goes as the rest of PowerSGD's uncompressed tensors do.
    options.compression = h.spec.powerSgd && ddp_detail::compressesAny(h.spec.powerSgdOptions, shapes)
                              ? GradientCompression::kPowerSgd
                              : GradientCompression::kNone;
    options.powerSgd = h.spec.powerSgdOptions;
    // DDP's hooks hand back the mean: the codec forms it as it writes the
    // bucket (gradient_codec.h, BucketResult).
    b.codec = ddp_detail::makeGradientCodec(options, shapes, names, worldSize,
                                            ddp_detail::BucketResult::kMean);
    b.slots = slots;
    adopt(h, b);
  }
  Bucket layout;
  for (size_t i = 0; i < slots.size(); ++i) {
    layout.entries.push_back({i, slots[i].offset, slots[i].numel});
  }
  layout.numel = numel;
  b.codec->exchange(0, layout, data, wire);
}

CodecRegistry::NamedState CodecRegistry::state(int codec) const {
  const Hook& h = hook(codec);
  std::map<std::string, torch::Tensor> all(h.pool.begin(), h.pool.end());
  for (const auto& [bucket, b] : h.buckets) {
    if (!b.codec) continue;
    for (auto& [key, value] : b.codec->state()) {
      if (key != ddp_detail::kPowerSgdStepsKey) all[key] = value;
    }
  }
  NamedState out(all.begin(), all.end());
  if (h.spec.powerSgd) {
    out.emplace_back(ddp_detail::kPowerSgdStepsKey, torch::tensor({h.steps}, torch::kLong));
  }
  return out;
}

void CodecRegistry::loadState(int codec, const NamedState& state) {
  Hook& h = hook(codec);
  h.pool.clear();
  h.steps = 0;
  for (const auto& [key, value] : state) {
    if (key == ddp_detail::kPowerSgdStepsKey) {
      h.steps = value.item<int64_t>();
      continue;
    }
    BIGBATCH_REQUIRE(key == ddp_detail::kPowerSgdStepsKey || !paramOf(key).empty(),
                     InvalidArgument,
                     "'{}' is not a bigbatch comm hook's state key (powersgd/steps, "
                     "powersgd/q/<parameter>, powersgd/error/<parameter>): load the dict its "
                     "state_dict() returned",
                     key);
    h.pool[key] = value;
  }
  // Every bucket's codec is made again at its next exchange, from the pool.
  for (auto& [bucket, b] : h.buckets) {
    b.codec.reset();
    b.slots.clear();
  }
}

}  // namespace bigbatch::torch_backend
