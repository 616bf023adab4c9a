// Optimizer behaviour beyond the golden values (optim_golden_test.cpp):
// the fused and per-tensor paths agree, non-finite gradients skip the step
// with the weights untouched, the result does not depend on the thread
// count, state round-trips, and exclusion rules pick the right tensors.
#include <gtest/gtest.h>

#include <cmath>

#include "bigbatch/common/error.h"
#include "bigbatch/optim/optimizer.h"

namespace bigbatch {
namespace {

// A parameter set shaped like a small CNN plus one large tensor, so the
// fused path cuts chunks and runs on more than one thread.
std::vector<NamedParameter> makeParams(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"conv1.weight", {16, 3, 3, 3}}, {"bn1.weight", {16}}, {"bn1.bias", {16}},
      {"conv2.weight", {64, 16, 3, 3}}, {"big.weight", {300, 400}}, {"fc.bias", {10}},
      {"frozen.weight", {4, 4}}};
  std::vector<NamedParameter> out;
  for (auto& [name, shape] : shapes) {
    torch::Tensor t = torch::randn(shape);
    if (name == "bn1.weight") t = torch::ones(shape);
    out.push_back({name, t.requires_grad_()});
  }
  return out;
}

void setGrads(std::vector<NamedParameter>& ps, uint64_t seed) {
  torch::manual_seed(seed);
  for (auto& p : ps) {
    if (p.name == "frozen.weight") continue;  // no gradient: must be left alone
    p.tensor.mutable_grad() = 0.01 * torch::randn(p.tensor.sizes());
  }
}

OptimizerOptions optionsFor(const std::string& name, bool fused) {
  OptimizerOptions o;
  o.name = name;
  o.fused = fused;
  o.weightDecay = 1e-3;
  o.excludedLrScale = 0.1;
  o.excludedWeightDecay = 1e-4;
  o.larsEta = 0.02;
  o.larsEpsilon = 1e-9;
  o.checkFinite = true;
  return o;
}

std::vector<torch::Tensor> run(const std::string& name, bool fused, int threads, int steps) {
  const int before = torch::get_num_threads();
  torch::set_num_threads(threads);
  auto ps = makeParams(7);
  auto opt = makeOptimizer(ps, optionsFor(name, fused));
  for (int s = 0; s < steps; ++s) {
    setGrads(ps, 100 + s);
    EXPECT_TRUE(opt->step({0.5 / (s + 1), 0.9 - 0.05 * s, 1.0 - 0.1 * s}).applied);
  }
  torch::set_num_threads(before);
  std::vector<torch::Tensor> out;
  for (auto& p : ps) out.push_back(p.tensor.detach().clone());
  return out;
}

class EveryOptimizer : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryOptimizer, FusedMatchesPerTensor) {
  auto fused = run(GetParam(), true, 2, 4);
  auto naive = run(GetParam(), false, 2, 4);
  for (size_t i = 0; i < fused.size(); ++i) {
    // fp32 updates computed in a different operation order: a few ulps.
    EXPECT_TRUE(torch::allclose(fused[i], naive[i], 1e-5, 1e-6))
        << GetParam() << " tensor " << i << " max diff "
        << (fused[i] - naive[i]).abs().max().item<float>();
  }
}

TEST_P(EveryOptimizer, FusedIsIndependentOfThreadCount) {
  auto one = run(GetParam(), true, 1, 3);
  auto two = run(GetParam(), true, 2, 3);
  auto three = run(GetParam(), true, 3, 3);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(torch::equal(one[i], two[i])) << GetParam() << " tensor " << i;
    EXPECT_TRUE(torch::equal(one[i], three[i])) << GetParam() << " tensor " << i;
  }
}

TEST_P(EveryOptimizer, NonFiniteGradientSkipsStepLeavingEverythingUnchanged) {
  for (bool fused : {true, false}) {
    for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
      auto ps = makeParams(3);
      auto opt = makeOptimizer(ps, optionsFor(GetParam(), fused));
      setGrads(ps, 4);
      ASSERT_TRUE(opt->step({0.1}).applied);
      std::vector<torch::Tensor> weights;
      for (auto& p : ps) weights.push_back(p.tensor.detach().clone());
      std::vector<torch::Tensor> state;
      for (auto& [name, t] : opt->state()) state.push_back(t.clone());
      setGrads(ps, 5);
      ps[4].tensor.mutable_grad()[7][9] = bad;  // one value in the large tensor
      const StepResult r = opt->step({0.1});
      EXPECT_FALSE(r.applied) << GetParam() << " fused=" << fused << " bad=" << bad;
      EXPECT_FALSE(std::isfinite(r.gradNormSq));
      for (size_t i = 0; i < ps.size(); ++i) {
        EXPECT_TRUE(torch::equal(ps[i].tensor.detach(), weights[i])) << ps[i].name;
      }
      const auto after = opt->state();
      for (size_t i = 0; i < after.size(); ++i) {
        EXPECT_TRUE(torch::equal(after[i].second, state[i])) << after[i].first;
      }
      EXPECT_EQ(opt->steps(), 1);
    }
  }
}

TEST_P(EveryOptimizer, StateRoundTripContinuesIdentically) {
  auto a = makeParams(9);
  auto optA = makeOptimizer(a, optionsFor(GetParam(), true));
  setGrads(a, 1);
  optA->step({0.2});
  // A second copy restored from A's weights and state.
  auto b = makeParams(9);
  auto optB = makeOptimizer(b, optionsFor(GetParam(), true));
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < a.size(); ++i) b[i].tensor.copy_(a[i].tensor);
  }
  optB->loadState(optA->state());
  EXPECT_EQ(optB->steps(), 1);
  setGrads(a, 2);
  setGrads(b, 2);
  optA->step({0.2});
  optB->step({0.2});
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i].tensor, b[i].tensor));
}

INSTANTIATE_TEST_SUITE_P(Optim, EveryOptimizer, ::testing::Values("sgd", "lars", "lamb"));

// LARS carries each layer's |w|² from one fused update to the next step
// (src/optim/carried_norms.h). Five steps on one optimizer, or — `fresh` —
// each step on a new optimizer given the previous one's state, which has
// nothing carried and reads every norm from memory. `doubleOne`: before
// step 3 one weight is doubled in place from outside.
std::vector<torch::Tensor> larsSteps(bool fresh, bool doubleOne) {
  auto ps = makeParams(11);
  auto opt = makeOptimizer(ps, optionsFor("lars", true));
  for (int s = 0; s < 5; ++s) {
    setGrads(ps, 200 + s);
    if (doubleOne && s == 3) {
      torch::NoGradGuard g;
      ps[3].tensor.mul_(2);
    }
    if (fresh) {
      auto next = makeOptimizer(ps, optionsFor("lars", true));
      next->loadState(opt->state());
      opt = std::move(next);
    }
    EXPECT_TRUE(opt->step({0.5, 0.9}).applied);
  }
  std::vector<torch::Tensor> out;
  for (auto& p : ps) out.push_back(p.tensor.detach().clone());
  return out;
}

TEST(Optimizer, LarsCarriedWeightNormIsExactAndDroppedAfterAnOutsideWrite) {
  // Carried norms give the same bits as norms read from memory.
  const auto carried = larsSteps(false, false);
  const auto fresh = larsSteps(true, false);
  for (size_t i = 0; i < carried.size(); ++i) {
    EXPECT_TRUE(torch::equal(carried[i], fresh[i])) << "tensor " << i;
  }
  // A weight changed by an ATen in-place op: its carried norm is not used
  // (if it were, its trust ratio — and so its update — would differ).
  const auto doubled = larsSteps(false, true);
  const auto doubledFresh = larsSteps(true, true);
  for (size_t i = 0; i < doubled.size(); ++i) {
    EXPECT_TRUE(torch::equal(doubled[i], doubledFresh[i])) << "tensor " << i;
  }
  EXPECT_FALSE(torch::equal(doubled[3], carried[3]));
}

TEST(Optimizer, LoadStateNamesTheMismatch) {
  auto ps = makeParams(1);
  auto lars = makeOptimizer(ps, optionsFor("lars", true));
  auto lamb = makeOptimizer(ps, optionsFor("lamb", true));
  try {
    lamb->loadState(lars->state());
    FAIL() << "loaded LARS state into LAMB";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("exp_avg"), std::string::npos) << e.what();
  }
  auto other = makeParams(1);
  other[0].tensor = torch::zeros({2, 2}).requires_grad_();
  auto small = makeOptimizer(other, optionsFor("lars", true));
  try {
    lars->loadState(small->state());
    FAIL() << "loaded state of another shape";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("conv1.weight.momentum"), std::string::npos) << e.what();
  }
}

TEST(Optimizer, ExclusionByRankOrPattern) {
  auto ps = makeParams(1);
  OptimizerOptions o;
  auto byRank = makeOptimizer(ps, o);
  std::vector<std::string> excluded;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (byRank->excluded(i)) excluded.push_back(ps[i].name);
  }
  EXPECT_EQ(excluded, (std::vector<std::string>{"bn1.weight", "bn1.bias", "fc.bias"}));
  o.excludePattern = "^bn|big";
  auto byName = makeOptimizer(ps, o);
  excluded.clear();
  for (size_t i = 0; i < ps.size(); ++i) {
    if (byName->excluded(i)) excluded.push_back(ps[i].name);
  }
  EXPECT_EQ(excluded, (std::vector<std::string>{"bn1.weight", "bn1.bias", "big.weight"}));
  o.exclude = false;
  auto none = makeOptimizer(ps, o);
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_FALSE(none->excluded(i));
  o.exclude = true;
  o.excludePattern = "(";
  EXPECT_THROW(makeOptimizer(ps, o), InvalidArgument);
  o.excludePattern = "";
  o.name = "adam";
  EXPECT_THROW(makeOptimizer(ps, o), InvalidArgument);
}

TEST(Optimizer, ZeroGradKeepsStorage) {
  torch::Tensor w = torch::ones({4}).requires_grad_();
  w.mutable_grad() = torch::ones({4});
  void* before = w.grad().data_ptr();
  auto opt = makeOptimizer({{"w", w}}, OptimizerOptions{});
  opt->zeroGrad();
  EXPECT_EQ(w.grad().data_ptr(), before);
  EXPECT_EQ(w.grad().abs().sum().item<float>(), 0.f);
}

TEST(Optimizer, ChannelsLastParametersTakeTheFusedPath) {
  torch::Tensor w = torch::randn({8, 4, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast);
  w.requires_grad_();
  w.mutable_grad() = torch::randn({8, 4, 3, 3}).contiguous(at::MemoryFormat::ChannelsLast);
  auto opt = makeOptimizer({{"w", w}}, optionsFor("lars", true));
  EXPECT_TRUE(opt->fusedEligible());
  // A gradient in another layout falls back to the per-tensor path.
  w.mutable_grad() = torch::randn({8, 4, 3, 3});
  EXPECT_FALSE(opt->fusedEligible());
  EXPECT_TRUE(opt->step({0.1}).applied);
}

}  // namespace
}  // namespace bigbatch
