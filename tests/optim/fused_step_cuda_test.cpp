// The fused optimizer kernels on a CUDA device (CUDA build, label "cuda"):
// for SGD, LARS and LAMB on ResNet-50's parameter shapes, FusedCudaStep
// writes what the host reference (fusedStepOnHost, checked against the CPU
// optimizers in fused_step_test.cpp) writes, to float rounding; a
// non-finite gradient skips the step with nothing written; and an
// optimizer over CUDA parameters takes this path and matches the same
// optimizer over CPU copies. The deferred form (issue 55) writes the same
// bytes as the waiting one, keeps the loss scale on the device by the
// host's rule, and never waits for the device.
#include "cuda/fused_step_cuda.h"

#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include <limits>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/optim/optimizer.h"
#include "fused_step.h"

namespace bigbatch {
namespace {

using optim_detail::FusedHyper;
using optim_detail::FusedTensor;

bool haveGpu() { return torch::cuda::is_available(); }

std::vector<NamedParameter> resnet50Params(const torch::Device& device) {
  torch::manual_seed(11);
  ModelOptions m;
  m.name = "resnet50";
  m.inChannels = 3;
  m.numClasses = 1000;
  std::vector<NamedParameter> out;
  for (const auto& item : buildModel(m)->named_parameters()) {
    torch::Tensor t = item.value().detach().clone().to(device).requires_grad_();
    torch::manual_seed(static_cast<uint64_t>(out.size()) + 100);
    t.mutable_grad() = (0.01 * torch::randn(t.sizes())).to(device);
    out.push_back({item.key(), t});
  }
  return out;
}

OptimizerOptions optionsFor(const std::string& name) {
  OptimizerOptions o;
  o.name = name;
  o.weightDecay = 5e-5;
  o.excludedLrScale = 0.1;
  o.larsEta = 0.001;
  o.checkFinite = true;
  return o;
}

void expectClose(const torch::Tensor& gpu, const torch::Tensor& cpu, const std::string& what) {
  const torch::Tensor a = gpu.to(torch::kCPU);
  EXPECT_TRUE(torch::allclose(a, cpu, /*rtol=*/2e-6, /*atol=*/1e-7))
      << what << ": max |diff| " << (a - cpu).abs().max().item<double>();
}

class FusedCuda : public ::testing::TestWithParam<std::string> {};

TEST_P(FusedCuda, KernelsMatchTheHostReference) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  const std::string name = GetParam();
  auto gpu = resnet50Params(torch::Device(torch::kCUDA, 0));
  auto host = resnet50Params(torch::kCPU);
  auto gpuOpt = makeOptimizer(gpu, optionsFor(name));
  auto hostOpt = makeOptimizer(host, optionsFor(name));
  ASSERT_TRUE(gpuOpt->deviceFusedEligible());
  optim_detail::FusedCudaStep kernels;
  for (int step = 0; step < 3; ++step) {  // the second and third reuse the tables
    const StepHyper h{0.5 / (step + 1), 0.9, 1.0, 1.0 / 256};
    std::vector<FusedTensor> gt, ht;
    FusedHyper gh, hh;
    gpuOpt->describeFusedStep(h, gt, gh);
    hostOpt->describeFusedStep(h, ht, hh);
    const auto got = kernels.run(gt, gh, c10::cuda::getCurrentCUDAStream().stream());
    const auto want = optim_detail::fusedStepOnHost(ht, hh);
    ASSERT_TRUE(got.applied && want.applied);
    EXPECT_NEAR(got.gradNormSq, want.gradNormSq, 1e-9 * want.gradNormSq);
  }
  for (size_t i = 0; i < gpu.size(); ++i) expectClose(gpu[i].tensor, host[i].tensor, gpu[i].name);
  const auto gs = gpuOpt->state(), hs = hostOpt->state();
  for (size_t k = 0; k < gs.size(); ++k) {
    if (gs[k].first != "step") expectClose(gs[k].second, hs[k].second, gs[k].first);
  }
}

TEST_P(FusedCuda, NonFiniteGradientSkipsTheStep) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  auto ps = resnet50Params(torch::Device(torch::kCUDA, 0));
  auto opt = makeOptimizer(ps, optionsFor(GetParam()));
  ps[40].tensor.mutable_grad().view({-1})[3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<torch::Tensor> before;
  for (const auto& p : ps) before.push_back(p.tensor.detach().clone());
  const StepResult r = opt->step({0.1, 0.9, 1.0, 1.0});
  EXPECT_FALSE(r.applied);
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(torch::equal(ps[i].tensor, before[i]));
}

TEST_P(FusedCuda, OptimizerOnCudaMatchesTheCpuOptimizer) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  auto gpu = resnet50Params(torch::Device(torch::kCUDA, 0));
  auto cpu = resnet50Params(torch::kCPU);
  auto gpuOpt = makeOptimizer(gpu, optionsFor(GetParam()));
  auto cpuOpt = makeOptimizer(cpu, optionsFor(GetParam()));
  for (int step = 0; step < 2; ++step) {
    const StepHyper h{0.2, 0.9, 1.0, 1.0};
    const StepResult a = gpuOpt->step(h), b = cpuOpt->step(h);
    ASSERT_TRUE(a.applied && b.applied);
    EXPECT_NEAR(a.gradNormSq, b.gradNormSq, 1e-9 * b.gradNormSq);
  }
  for (size_t i = 0; i < gpu.size(); ++i) expectClose(gpu[i].tensor, cpu[i].tensor, gpu[i].name);
}

// The deferred step (issue 55): the same kernels, the step's values read
// from device memory (each tensor's lr and decay a multiplier of them),
// write the same bytes as the waiting step — the products are the same
// doubles — with the learning rate changing every step.
TEST_P(FusedCuda, TheDeferredStepWritesWhatTheWaitingStepWrites) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  auto waited = resnet50Params(torch::Device(torch::kCUDA, 0));
  auto deferred = resnet50Params(torch::Device(torch::kCUDA, 0));
  auto a = makeOptimizer(waited, optionsFor(GetParam()));
  auto b = makeOptimizer(deferred, optionsFor(GetParam()));
  for (int step = 0; step < 3; ++step) {
    const StepHyper h{0.4 / (step + 1), 0.9 - 0.1 * step, 1.0 - 0.25 * step, 1.0 / 128};
    ASSERT_TRUE(a->step(h).applied);
    b->stepDeferred(h);
    const auto settled = b->settleDeferred();
    ASSERT_TRUE(settled.has_value() && settled->applied);
    EXPECT_FALSE(b->settleDeferred().has_value());  // nothing pending any more
  }
  EXPECT_EQ(a->steps(), b->steps());
  for (size_t i = 0; i < waited.size(); ++i) {
    EXPECT_TRUE(torch::equal(waited[i].tensor, deferred[i].tensor)) << waited[i].name;
  }
  const auto sa = a->state(), sb = b->state();
  for (size_t k = 0; k < sa.size(); ++k) EXPECT_TRUE(torch::equal(sa[k].second, sb[k].second)) << sa[k].first;
}

INSTANTIATE_TEST_SUITE_P(Rules, FusedCuda, ::testing::Values("sgd", "lars", "lamb"));

// The loss scale in device memory, updated by the step's last block by the
// host's rule (amp/loss_scale_rule.h): growth after growthInterval clean
// steps, a back-off and a skipped update on a non-finite gradient — each
// step's state equal to a host DynamicLossScaler's fed the same outcomes.
TEST(FusedCudaDeferred, TheLossScaleOnTheDeviceFollowsTheHostsRule) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  auto ps = resnet50Params(torch::Device(torch::kCUDA, 0));
  auto opt = makeOptimizer(ps, optionsFor("sgd"));
  LossScalerOptions lo;
  lo.initScale = 1024;
  lo.growthInterval = 2;
  DynamicLossScaler host(lo);
  opt->attachLossScale(host.rule(), host.state());
  const bool finite[] = {true, true, false, true, true};
  for (int step = 0; step < 5; ++step) {
    torch::Tensor before = ps[40].tensor.detach().clone();
    const float poison = finite[step] ? 1.0f : std::numeric_limits<float>::quiet_NaN();
    ps[40].tensor.mutable_grad().view({-1})[3] = 0.01f * poison;
    opt->stepDeferred({0.1, 0.9, 1.0, 1.0});
    const auto r = opt->settleDeferred();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->applied, finite[step]) << "step " << step;
    EXPECT_EQ(r->scaleBefore, host.scale()) << "step " << step;
    host.update(finite[step]);
    EXPECT_EQ(r->scaleAfter.scale, host.state().scale) << "step " << step;
    EXPECT_EQ(r->scaleAfter.cleanSteps, host.state().cleanSteps) << "step " << step;
    EXPECT_EQ(r->scaleAfter.overflowsLeft, host.state().overflowsLeft) << "step " << step;
    EXPECT_EQ(opt->deviceLossScale().item<double>(), host.scale()) << "step " << step;
    EXPECT_EQ(opt->deviceSkipped().item<int>(), finite[step] ? 0 : 1) << "step " << step;
    if (!finite[step]) EXPECT_TRUE(torch::equal(ps[40].tensor, before)) << "a skipped step wrote";
  }
  EXPECT_EQ(host.scale(), 2048.0);  // grew, backed off, grew again
}

// The host does not wait for a deferred step: it returns while a spin queued
// before it still holds the stream.
TEST(FusedCudaDeferred, AStepReturnsWhileTheStreamIsStillBusy) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  auto ps = resnet50Params(torch::Device(torch::kCUDA, 0));
  auto opt = makeOptimizer(ps, optionsFor("lars"));
  opt->stepDeferred({0.1, 0.9, 1.0, 1.0});  // the tables
  ASSERT_TRUE(opt->settleDeferred().has_value());
  torch::cuda::synchronize();
  at::cuda::sleep(400'000'000);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  ASSERT_FALSE(stream.query());
  opt->stepDeferred({0.1, 0.9, 1.0, 1.0});
  EXPECT_FALSE(stream.query()) << "stepDeferred() waited for the device";
  const auto r = opt->settleDeferred();  // this one waits
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->applied);
  EXPECT_TRUE(stream.query());
}

}  // namespace
}  // namespace bigbatch
