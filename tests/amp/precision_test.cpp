// Low-precision compute: which ops run in bf16 under the CPU autocast (the
// table in docs/MIXED_PRECISION.md), master weights that stay fp32 while
// the 16-bit copy each forward uses always equals the latest masters, and
// fp16 compute on CPU refused with the fix named.
#include <gtest/gtest.h>

#include "bigbatch/amp/precision.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/torch_compat.h"
#include "bigbatch/optim/optimizer.h"

namespace bigbatch {
namespace {

TEST(Precision, NamesRoundTripAndUnknownIsRefused) {
  for (const char* n : {"fp32", "bf16", "fp16"}) EXPECT_STREQ(precisionName(parsePrecision(n)), n);
  EXPECT_EQ(computeType(Precision::kBf16), torch::kBFloat16);
  EXPECT_THROW(parsePrecision("fp8"), InvalidArgument);
}

TEST(Precision, Fp16ComputeOnCpuIsRefusedNamingTheFix) {
  try {
    AutocastScope scope(Precision::kFp16, c10::DeviceType::CPU);
    FAIL() << "fp16 autocast on CPU was accepted";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bf16"), std::string::npos) << m;
    EXPECT_NE(m.find("ddp.exchange_dtype = fp16"), std::string::npos) << m;
  }
  EXPECT_FALSE(compat::autocastEnabled(c10::DeviceType::CPU));
}

TEST(Precision, ScopeEnablesAndRestores) {
  EXPECT_FALSE(compat::autocastEnabled(c10::DeviceType::CPU));
  {
    AutocastScope fp32(Precision::kFp32, c10::DeviceType::CPU);
    EXPECT_FALSE(compat::autocastEnabled(c10::DeviceType::CPU));
    AutocastScope bf16(Precision::kBf16, c10::DeviceType::CPU);
    EXPECT_TRUE(compat::autocastEnabled(c10::DeviceType::CPU));
    EXPECT_EQ(compat::autocastType(c10::DeviceType::CPU), torch::kBFloat16);
    EXPECT_FALSE(at::autocast::is_autocast_cache_enabled());
  }
  EXPECT_FALSE(compat::autocastEnabled(c10::DeviceType::CPU));
  EXPECT_TRUE(at::autocast::is_autocast_cache_enabled());
}

// What runs in which type under bf16 autocast with this libtorch, for the
// layers bigbatch's models use. docs/MIXED_PRECISION.md states the same.
TEST(Precision, Bf16OpTableOfThisLibtorch) {
  torch::manual_seed(1);
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(3, 8, 3).padding(1).bias(false));
  torch::nn::BatchNorm2d bn(8);
  torch::nn::Linear fc(8, 10);
  const torch::Tensor x = torch::randn({4, 3, 8, 8});
  AutocastScope scope(Precision::kBf16, c10::DeviceType::CPU);
  const torch::Tensor h = conv->forward(x);
  EXPECT_EQ(h.scalar_type(), torch::kBFloat16) << "conv2d";
  const torch::Tensor b = bn->forward(h);
  EXPECT_EQ(b.scalar_type(), torch::kBFloat16) << "batch_norm output follows its input";
  EXPECT_EQ(bn->running_mean.scalar_type(), torch::kFloat) << "BatchNorm statistics stay fp32";
  EXPECT_EQ(bn->weight.scalar_type(), torch::kFloat);
  EXPECT_EQ(torch::relu(b).scalar_type(), torch::kBFloat16) << "relu";
  EXPECT_EQ(torch::max_pool2d(b, 2).scalar_type(), torch::kBFloat16) << "max_pool2d";
  const torch::Tensor pooled = torch::adaptive_avg_pool2d(b, {1, 1}).flatten(1);
  EXPECT_EQ(pooled.scalar_type(), torch::kBFloat16) << "adaptive_avg_pool2d";
  EXPECT_EQ((b + h).scalar_type(), torch::kBFloat16) << "residual add of two bf16 tensors";
  EXPECT_EQ((b + torch::ones_like(b, torch::kFloat)).scalar_type(), torch::kFloat)
      << "add with an fp32 operand promotes";
  EXPECT_EQ(fc->forward(pooled).scalar_type(), torch::kBFloat16) << "linear";
}

// A conv + BN + linear model trained under bf16 autocast: after every step
// the parameters, their gradients and the optimizer state are fp32, and the
// forward's 16-bit copy is exactly bf16(current masters) — checked by
// comparing the autocast linear against linear() on weights cast by hand.
TEST(Precision, MastersStayFp32AndTheCopyFollowsEveryStep) {
  torch::manual_seed(2);
  torch::nn::Sequential model(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 3).padding(1).bias(false)),
      torch::nn::BatchNorm2d(8), torch::nn::ReLU(),
      torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions({1, 1})),
      torch::nn::Flatten(), torch::nn::Linear(8, 10));
  auto fc = model->ptr<torch::nn::LinearImpl>(5);
  OptimizerOptions o;
  o.name = "sgd";
  o.checkFinite = true;
  auto opt = makeOptimizer(namedParameters(*model), o);
  const torch::Tensor x = torch::randn({16, 1, 8, 8});
  const torch::Tensor y = torch::randint(0, 10, {16});
  const torch::Tensor probe = torch::randn({5, 8});
  for (int step = 0; step < 4; ++step) {
    opt->zeroGrad();
    torch::Tensor logits;
    {
      AutocastScope scope(Precision::kBf16, c10::DeviceType::CPU);
      logits = model->forward(x);
    }
    EXPECT_EQ(logits.scalar_type(), torch::kBFloat16);
    torch::nn::functional::cross_entropy(logits.to(torch::kFloat), y).backward();
    ASSERT_TRUE(opt->step({0.5, 0.9}).applied);
    EXPECT_EQ(firstNonFp32State(*model), "") << "after step " << step;
    for (const auto& p : model->parameters()) EXPECT_EQ(p.grad().scalar_type(), torch::kFloat);
    for (const auto& [name, t] : opt->state()) {
      if (t.is_floating_point()) {
        EXPECT_EQ(t.scalar_type(), torch::kFloat) << name;
      }
    }
    torch::NoGradGuard noGrad;
    torch::Tensor viaAutocast;
    {
      AutocastScope scope(Precision::kBf16, c10::DeviceType::CPU);
      viaAutocast = fc->forward(probe);
    }
    const torch::Tensor byHand = torch::linear(probe.to(torch::kBFloat16),
                                               fc->weight.to(torch::kBFloat16),
                                               fc->bias.to(torch::kBFloat16));
    EXPECT_TRUE(torch::equal(viaAutocast, byHand)) << "stale 16-bit copy after step " << step;
  }
  model->to(torch::kBFloat16);
  EXPECT_NE(firstNonFp32State(*model), "");
}

}  // namespace
}  // namespace bigbatch
