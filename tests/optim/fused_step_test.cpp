// The fused device step's algorithm (src/optim/fused_step.h), run on the
// host with the very rules the CUDA kernels use, against the CPU
// optimizers: for SGD, LARS and LAMB, with excluded parameters, a loss
// scale, a parameter without gradient and several steps, the weights and
// state it writes match the CPU step's to float rounding (the two sum the
// norms in different orders), its gradient norm matches, and a non-finite
// gradient skips the step with nothing written. Also: the chunk table
// covers every value exactly once, and a CPU build never takes the device
// path.
#include "fused_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bigbatch/optim/optimizer.h"

namespace bigbatch {
namespace {

using optim_detail::FusedHyper;
using optim_detail::FusedTensor;

// Shaped like a small CNN plus one tensor of several chunks.
std::vector<NamedParameter> makeParams(uint64_t seed) {
  torch::manual_seed(seed);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"conv1.weight", {16, 3, 3, 3}}, {"bn1.weight", {16}}, {"bn1.bias", {16}},
      {"big.weight", {300, 400}},      {"fc.bias", {10}},    {"frozen.weight", {4, 4}}};
  std::vector<NamedParameter> out;
  for (const auto& [name, shape] : shapes)
    out.push_back({name, torch::randn(shape).requires_grad_()});
  return out;
}

// Gradients scaled by 1024 (as under loss scaling); frozen.weight has none.
void setGrads(std::vector<NamedParameter>& ps, uint64_t seed) {
  torch::manual_seed(seed);
  for (auto& p : ps) {
    if (p.name == "frozen.weight") continue;
    p.tensor.mutable_grad() = 10.24 * torch::randn(p.tensor.sizes());
  }
}

OptimizerOptions optionsFor(const std::string& name) {
  OptimizerOptions o;
  o.name = name;
  o.weightDecay = 1e-3;
  o.excludedLrScale = 0.1;
  o.excludedWeightDecay = 1e-4;
  o.larsEta = 0.02;
  o.larsEpsilon = 1e-9;
  o.phiMin = 0.01;
  o.phiMax = 10;
  o.checkFinite = true;
  return o;
}

// Copies `from`'s weights and optimizer state (its step count included)
// into `to`.
void copyInto(Optimizer& from, std::vector<NamedParameter>& fromParams, Optimizer& to,
              std::vector<NamedParameter>& toParams) {
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < fromParams.size(); ++i) toParams[i].tensor.copy_(fromParams[i].tensor);
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (auto& [name, t] : from.state()) state.emplace_back(name, t.clone());
  to.loadState(state);
}

void expectClose(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  // Norms summed in another order move a coefficient by an ulp or so.
  EXPECT_TRUE(torch::allclose(a, b, /*rtol=*/2e-6, /*atol=*/1e-7))
      << what << ": max |diff| " << (a - b).abs().max().item<double>();
}

class FusedStepOnHost : public ::testing::TestWithParam<std::string> {};

TEST_P(FusedStepOnHost, MatchesTheCpuOptimizerStepByStep) {
  const std::string name = GetParam();
  auto cpuParams = makeParams(3), hostParams = makeParams(3);
  auto cpu = makeOptimizer(cpuParams, optionsFor(name));
  auto host = makeOptimizer(hostParams, optionsFor(name));
  ASSERT_TRUE(cpu->fusedEligible());
  for (int step = 0; step < 4; ++step) {
    copyInto(*cpu, cpuParams, *host, hostParams);
    setGrads(cpuParams, 50 + step);
    setGrads(hostParams, 50 + step);
    const StepHyper h{0.4 / (step + 1), 0.9 - 0.02 * step, 1.0, 1.0 / 1024};
    std::vector<FusedTensor> tensors;
    FusedHyper hyper;
    host->describeFusedStep(h, tensors, hyper);
    const auto frozenBefore = hostParams.back().tensor.clone();
    const StepResult expected = cpu->step(h);
    const optim_detail::FusedOutcome got = optim_detail::fusedStepOnHost(tensors, hyper);
    ASSERT_TRUE(expected.applied);
    ASSERT_TRUE(got.applied);
    EXPECT_NEAR(got.gradNormSq, expected.gradNormSq, 1e-9 * expected.gradNormSq) << name;
    for (size_t i = 0; i < cpuParams.size(); ++i) {
      expectClose(hostParams[i].tensor, cpuParams[i].tensor,
                  name + " step " + std::to_string(step) + " " + cpuParams[i].name);
    }
    const auto cpuState = cpu->state();
    auto hostState = host->state();
    for (size_t k = 0; k < cpuState.size(); ++k) {
      if (cpuState[k].first == "step") continue;  // the host run does not count steps
      expectClose(hostState[k].second, cpuState[k].second, name + " " + cpuState[k].first);
    }
    EXPECT_TRUE(torch::equal(hostParams.back().tensor, frozenBefore)) << "no gradient, no update";
  }
}

TEST_P(FusedStepOnHost, NonFiniteGradientWritesNothing) {
  auto ps = makeParams(4);
  auto opt = makeOptimizer(ps, optionsFor(GetParam()));
  setGrads(ps, 9);
  ps[3].tensor.mutable_grad()[7][11] = std::numeric_limits<float>::infinity();
  std::vector<torch::Tensor> before;
  for (const auto& p : ps) before.push_back(p.tensor.clone());
  std::vector<FusedTensor> tensors;
  FusedHyper hyper;
  opt->describeFusedStep({0.1, 0.9, 1.0, 1.0}, tensors, hyper);
  const auto out = optim_detail::fusedStepOnHost(tensors, hyper);
  EXPECT_FALSE(out.applied);
  EXPECT_FALSE(std::isfinite(out.gradNormSq));
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(torch::equal(ps[i].tensor, before[i]));
  for (const auto& [name, t] : opt->state()) {
    if (name != "step") {
      EXPECT_EQ(t.abs().sum().item<double>(), 0.0) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, FusedStepOnHost, ::testing::Values("sgd", "lars", "lamb"));

TEST(FusedChunks, CoverEveryValueOnceAndStayInsideTheirTensor) {
  const int64_t c = optim_detail::kFusedChunk;
  const std::vector<int64_t> numels = {0, 1, c - 1, c, c + 1, 3 * c + 5, 0, 7};
  const auto chunks = optim_detail::fusedChunks(numels);
  std::vector<int64_t> covered(numels.size(), 0);
  int64_t expectedChunks = 0;
  for (int64_t n : numels) expectedChunks += (n + c - 1) / c;
  ASSERT_EQ(static_cast<int64_t>(chunks.size()), expectedChunks);
  for (size_t k = 0; k < chunks.size(); ++k) {
    const auto& ch = chunks[k];
    EXPECT_EQ(ch.begin, covered[ch.tensor]) << "chunks of a tensor are contiguous, in order";
    EXPECT_GT(ch.end, ch.begin);
    EXPECT_LE(ch.end - ch.begin, c);
    EXPECT_LE(ch.end, numels[ch.tensor]);
    covered[ch.tensor] = ch.end;
    if (k > 0) {
      EXPECT_GE(ch.tensor, chunks[k - 1].tensor);
    }
  }
  EXPECT_EQ(covered, numels);
}

TEST(FusedStepOnDevice, CpuTensorsNeverTakeTheDevicePath) {
  auto ps = makeParams(5);
  auto opt = makeOptimizer(ps, optionsFor("lars"));
  setGrads(ps, 1);
  EXPECT_TRUE(opt->fusedEligible());
  EXPECT_FALSE(opt->deviceFusedEligible());
}

}  // namespace
}  // namespace bigbatch
