// The dynamic loss scaler: growth after N clean steps, back-off and skip on
// overflow, floor, ceiling, hysteresis, state round trip; and its use with
// the optimizers — an injected inf or NaN leaves weights and optimizer state
// bit-identical, and unscaling inside the fused passes is exact.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/common/error.h"
#include "bigbatch/optim/optimizer.h"

namespace bigbatch {
namespace {

TEST(LossScaler, DefaultsFollowTheIssue) {
  DynamicLossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.options().growthInterval, 2000);
  EXPECT_EQ(s.inverse(), 1.0 / 65536.0);
}

TEST(LossScaler, GrowsAfterExactlyNCleanSteps) {
  LossScalerOptions o;
  o.initScale = 1024;
  o.growthInterval = 5;
  DynamicLossScaler s(o);
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(s.update(true));
    EXPECT_EQ(s.scale(), 1024.0) << "grew after " << i + 1 << " clean steps";
  }
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 2048.0);
  // The count starts again after a growth.
  for (int i = 0; i < 4; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 2048.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 4096.0);
}

TEST(LossScaler, OverflowHalvesSkipsAndRestartsTheCount) {
  LossScalerOptions o;
  o.initScale = 1024;
  o.growthInterval = 3;
  DynamicLossScaler s(o);
  s.update(true);
  s.update(true);
  EXPECT_FALSE(s.update(false));  // skip
  EXPECT_EQ(s.scale(), 512.0);
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 512.0);  // two clean steps since the overflow, not four
  s.update(true);
  EXPECT_EQ(s.scale(), 1024.0);
}

TEST(LossScaler, FloorAndCeilingHold) {
  LossScalerOptions o;
  o.initScale = 4;
  o.minScale = 2;
  o.maxScale = 8;
  o.growthInterval = 1;
  DynamicLossScaler s(o);
  s.update(false);
  EXPECT_EQ(s.scale(), 2.0);
  EXPECT_TRUE(s.atFloor());
  EXPECT_FALSE(s.update(false));  // still skipped at the floor
  EXPECT_EQ(s.scale(), 2.0);
  for (int i = 0; i < 10; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 8.0);
  EXPECT_FALSE(s.atFloor());
}

TEST(LossScaler, HysteresisDelaysTheBackoff) {
  LossScalerOptions o;
  o.initScale = 1024;
  o.hysteresis = 2;
  DynamicLossScaler s(o);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 1024.0);  // first overflow: skipped, scale kept
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 512.0);   // second: backed off
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 512.0);
}

TEST(LossScaler, StateRoundTripsAndBadStateIsRefused) {
  LossScalerOptions o;
  o.growthInterval = 10;
  o.hysteresis = 3;
  DynamicLossScaler a(o);
  for (int i = 0; i < 7; ++i) a.update(true);
  a.update(false);
  a.update(true);
  DynamicLossScaler b(o);
  b.loadState(a.state());
  for (int i = 0; i < 30; ++i) {
    const bool finite = i % 7 != 3;
    EXPECT_EQ(a.update(finite), b.update(finite));
    EXPECT_EQ(a.scale(), b.scale());
  }
  EXPECT_THROW(b.loadState({1e30, 0, 1}), InvalidArgument);  // above the ceiling
  EXPECT_THROW(b.loadState({1024, 10, 1}), InvalidArgument);  // count >= interval
  EXPECT_THROW(b.loadState({1024, 0, 0}), InvalidArgument);
}

TEST(LossScaler, BadOptionsAreRefusedByName) {
  auto message = [](LossScalerOptions o) {
    try {
      DynamicLossScaler s(o);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  LossScalerOptions o;
  o.growthFactor = 1.0;
  EXPECT_NE(message(o).find("growth_factor"), std::string::npos);
  o = {};
  o.backoffFactor = 1.0;
  EXPECT_NE(message(o).find("backoff_factor"), std::string::npos);
  o = {};
  o.initScale = 1e9;  // above the 2^24 ceiling
  EXPECT_NE(message(o).find("init_scale"), std::string::npos);
}

// --- with the optimizers ---------------------------------------------------

std::vector<NamedParameter> makeParams() {
  torch::manual_seed(3);
  std::vector<NamedParameter> out;
  out.push_back({"conv.weight", torch::randn({32, 16, 3, 3}).requires_grad_()});
  out.push_back({"bn.weight", torch::ones({32}).requires_grad_()});
  out.push_back({"bn.bias", torch::zeros({32}).requires_grad_()});
  out.push_back({"fc.weight", torch::randn({200, 300}).requires_grad_()});
  return out;
}

void setGrads(std::vector<NamedParameter>& ps, int seed, double scale) {
  torch::manual_seed(seed);
  for (auto& p : ps) p.tensor.mutable_grad() = 0.01 * torch::randn(p.tensor.sizes()) * scale;
}

OptimizerOptions optionsFor(const std::string& name, bool fused) {
  OptimizerOptions o;
  o.name = name;
  o.fused = fused;
  o.checkFinite = true;
  o.excludedLrScale = 0.1;
  o.larsEta = 0.02;
  return o;
}

struct Case {
  std::string optimizer;
  bool fused;
};

class WithOptimizer : public ::testing::TestWithParam<Case> {};

std::vector<torch::Tensor> snapshot(const std::vector<NamedParameter>& ps, const Optimizer& opt) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.tensor.detach().clone());
  for (const auto& [name, t] : opt.state()) out.push_back(t.clone());
  return out;
}

// Steps 1-2 clean; step 3's gradients overflow (inf in one tensor, then NaN
// in another): skipped with every weight and state tensor bit-identical,
// and the scaler halves.
TEST_P(WithOptimizer, InjectedInfAndNanSkipWithWeightsBitIdentical) {
  auto ps = makeParams();
  auto opt = makeOptimizer(ps, optionsFor(GetParam().optimizer, GetParam().fused));
  LossScalerOptions so;
  so.initScale = 1024;
  DynamicLossScaler scaler(so);
  for (int s = 0; s < 2; ++s) {
    setGrads(ps, 10 + s, scaler.scale());
    const StepResult r = opt->step({0.1, 0.9, 1.0, scaler.inverse()});
    ASSERT_TRUE(r.applied);
    EXPECT_TRUE(scaler.update(r.applied));
  }
  const std::pair<float, size_t> injections[] = {{std::numeric_limits<float>::infinity(), 0},
                                                  {std::nanf(""), 3}};
  for (const auto& [bad, tensor] : injections) {
    const auto before = snapshot(ps, *opt);
    const int64_t stepsBefore = opt->steps();
    setGrads(ps, 20, scaler.scale());
    ps[tensor].tensor.mutable_grad().view(-1)[17] = bad;
    const double scaleBefore = scaler.scale();
    const StepResult r = opt->step({0.1, 0.9, 1.0, scaler.inverse()});
    EXPECT_FALSE(r.applied);
    EXPECT_FALSE(scaler.update(r.applied));
    EXPECT_EQ(scaler.scale(), scaleBefore / 2);
    EXPECT_EQ(opt->steps(), stepsBefore);
    const auto after = snapshot(ps, *opt);
    ASSERT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_TRUE(torch::equal(before[i], after[i])) << "tensor " << i << " changed on a skipped step";
    }
  }
}

// Gradients scaled by 2^k and read back with gradScale = 2^-k give exactly
// the weights of the unscaled gradients (the scale is a power of two).
TEST_P(WithOptimizer, UnscalingInsideTheStepIsExact) {
  auto a = makeParams();
  auto b = makeParams();
  auto optA = makeOptimizer(a, optionsFor(GetParam().optimizer, GetParam().fused));
  auto optB = makeOptimizer(b, optionsFor(GetParam().optimizer, GetParam().fused));
  const double scale = 32768.0;
  for (int s = 0; s < 3; ++s) {
    setGrads(a, 30 + s, 1.0);
    setGrads(b, 30 + s, scale);
    const StepResult ra = optA->step({0.1, 0.9, 1.0, 1.0});
    const StepResult rb = optB->step({0.1, 0.9, 1.0, 1.0 / scale});
    ASSERT_TRUE(ra.applied && rb.applied);
    EXPECT_NEAR(ra.gradNormSq, rb.gradNormSq, 1e-12 * ra.gradNormSq);
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].tensor, b[i].tensor)) << a[i].name;
  }
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, WithOptimizer,
                         ::testing::Values(Case{"sgd", true}, Case{"sgd", false},
                                           Case{"lars", true}, Case{"lars", false},
                                           Case{"lamb", true}, Case{"lamb", false}),
                         [](const auto& info) {
                           return info.param.optimizer + (info.param.fused ? "_fused" : "_per_tensor");
                         });

}  // namespace
}  // namespace bigbatch
