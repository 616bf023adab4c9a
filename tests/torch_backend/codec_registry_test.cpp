// The comm hooks' codec state follows parameters, not bucket indices: when
// DDP's rebuild moves parameters between buckets (and a resumed script's
// new DDP starts from its first layout again), every parameter's PowerSGD
// error memory and Q go on where they were — the same bits as a run that
// never changed its layout.
#include "codec_registry.h"

#include <gtest/gtest.h>

#include "bigbatch/common/error.h"
#include "gradient_codec.h"
#include "powersgd_plan.h"

namespace bigbatch::torch_backend {
namespace {

// One rank: the sum is the rank's own values (PowerSGD still compresses).
class LocalSum : public ddp_detail::WireSum {
 public:
  void sum(void*, size_t, DataType) override {}
  std::pair<size_t, size_t> kept(size_t count) const override { return {0, count}; }
  const char* operation() const override { return "a test's sum"; }
};

struct Param {
  std::string name;
  std::vector<int64_t> shape;
};

const std::vector<Param> kParams = {
    {"a", {64, 32}}, {"b", {48, 40}}, {"c", {40}}, {"d", {32, 32}}};

// Buckets as lists of indices into kParams.
using Layout = std::vector<std::vector<int>>;
const Layout kFirst = {{0, 1}, {2, 3}};      // DDP's first layout
const Layout kRebuilt = {{3, 0}, {1}, {2}};  // after its rebuild: a and b change buckets

// Step `step`'s gradient of parameter `p` (the same on every call).
torch::Tensor gradient(int step, int p) {
  torch::manual_seed(1000 * step + p);
  return torch::randn(kParams[static_cast<size_t>(p)].shape);
}

// One step through `layout`: every parameter's exchanged values. With
// `positional`, each tensor is named by its place ("#b<bucket>.<i>"), as
// hooks.py names them when the hook was given no module.
std::vector<torch::Tensor> step(CodecRegistry& r, int codec, const Layout& layout, int s,
                                bool positional = false) {
  std::vector<torch::Tensor> out(kParams.size());
  LocalSum wire;
  for (size_t b = 0; b < layout.size(); ++b) {
    std::vector<BucketSlot> slots;
    std::vector<torch::Tensor> parts;
    int64_t offset = 0;
    for (int p : layout[b]) {
      const torch::Tensor g = gradient(s, p).reshape({-1});
      slots.push_back({offset, g.numel(), kParams[static_cast<size_t>(p)].shape,
                       positional ? "#b" + std::to_string(b) + "." + std::to_string(slots.size())
                                  : kParams[static_cast<size_t>(p)].name});
      parts.push_back(g);
      offset += g.numel();
    }
    torch::Tensor buffer = torch::cat(parts);
    r.exchange(codec, static_cast<int64_t>(b), slots, buffer.data_ptr<float>(), buffer.numel(),
               wire, /*worldSize=*/1);
    for (size_t i = 0; i < slots.size(); ++i) {
      out[static_cast<size_t>(layout[b][i])] =
          buffer.narrow(0, slots[i].offset, slots[i].numel).clone();
    }
  }
  return out;
}

int powerSgd(CodecRegistry& r) {
  CodecSpec spec;
  spec.powerSgd = true;
  spec.powerSgdOptions.rank = 2;
  spec.powerSgdOptions.startStep = 1;
  return r.add(spec);
}

void expectSame(const std::vector<torch::Tensor>& x, const std::vector<torch::Tensor>& y, int s) {
  for (size_t p = 0; p < x.size(); ++p) {
    EXPECT_TRUE(torch::equal(x[p], y[p])) << "step " << s << ", parameter " << kParams[p].name;
  }
}

TEST(CodecRegistry, StateFollowsParametersWhenTheRebuildMovesThem) {
  // A run that goes on, and one that restarts from its state after step 3
  // with a new DDP: its first layout for a step, then the rebuilt one.
  CodecRegistry run;
  const int c = powerSgd(run);
  step(run, c, kFirst, 1);
  for (int s = 2; s <= 3; ++s) step(run, c, kRebuilt, s);
  const CodecRegistry::NamedState saved = run.state(c);

  CodecRegistry resumed;
  const int rc = powerSgd(resumed);
  resumed.loadState(rc, saved);
  for (int s = 4; s <= 6; ++s) {
    const std::vector<torch::Tensor> expected = step(run, c, kRebuilt, s);
    const std::vector<torch::Tensor> got = step(resumed, rc, s == 4 ? kFirst : kRebuilt, s);
    expectSame(expected, got, s);
  }
  // PowerSGD did compress (the exchanged gradient is not the gradient).
  EXPECT_FALSE(torch::equal(step(run, c, kRebuilt, 7)[0], gradient(7, 0).reshape({-1})));
}

TEST(CodecRegistry, ARebuildMidRunKeepsEveryParametersState) {
  // One run rebuilding after step 3, against one whose state moves to a
  // fresh registry that starts with the rebuilt layout.
  CodecRegistry run;
  const int c = powerSgd(run);
  for (int s = 1; s <= 3; ++s) step(run, c, kFirst, s);
  CodecRegistry fresh;
  const int fc = powerSgd(fresh);
  fresh.loadState(fc, run.state(c));
  for (int s = 4; s <= 5; ++s) expectSame(step(run, c, kRebuilt, s), step(fresh, fc, kRebuilt, s), s);
  // The saved step count is the steps taken.
  int64_t steps = -1;
  for (const auto& [key, value] : run.state(c)) {
    if (key == ddp_detail::kPowerSgdStepsKey) steps = value.item<int64_t>();
  }
  EXPECT_EQ(steps, 5);
}

TEST(CodecRegistry, StateNamedByPlaceIsDroppedWhenTheLayoutChanges) {
  // Named by place, the rebuilt buckets' places hold other tensors: their
  // state starts afresh (as a registry with no state but the step count),
  // never another tensor's (which would not even fit: a's Q for d).
  CodecRegistry run;
  const int c = powerSgd(run);
  for (int s = 1; s <= 3; ++s) step(run, c, kFirst, s, /*positional=*/true);
  CodecRegistry fresh;
  const int fc = powerSgd(fresh);
  fresh.loadState(fc, {{ddp_detail::kPowerSgdStepsKey, torch::tensor({int64_t{3}})}});
  for (int s = 4; s <= 5; ++s) {
    expectSame(step(run, c, kRebuilt, s, true), step(fresh, fc, kRebuilt, s, true), s);
  }
}

TEST(CodecRegistry, WireCodecIsOnePerWireAndUnknownIdsAreRefused) {
  CodecRegistry r;
  const int fp16 = r.wireCodec(DataType::kFloat16);
  EXPECT_EQ(r.wireCodec(DataType::kFloat16), fp16);
  EXPECT_NE(r.wireCodec(DataType::kBFloat16), fp16);
  EXPECT_THROW(r.check(99), InvalidArgument);
  EXPECT_THROW(r.wireCodec(DataType::kFloat32), InvalidArgument);
}

}  // namespace
}  // namespace bigbatch::torch_backend
