// The fused BatchNorm+ReLU and BatchNorm+add+ReLU (cuDNN; CUDA build, label
// "cuda") against the unfused layers on the same weights and inputs, fp16
// channels-last, at a small shape and at ResNet-50's own (batch 256):
// outputs, the gradients of x, z, γ and β, and the running statistics, each
// within fp16's rounding; bf16 is not fused (cuDNN's fused ops take half
// only) and gives the caller the unfused layers; and a ResNet-50 bottleneck
// built with and without fusion, forward and backward under autocast (bf16:
// both run unfused, within bf16's rounding, as cuDNN's convolution backward
// may sum in another order each run). Tolerances: the fused kernel
// and ATen's sum the statistics in other orders and round the output once
// instead of three times (BatchNorm, add, ReLU each rounded to 16 bits), so
// outputs agree to a few fp16 ulps (2^-10 relative: atol/rtol 1e-2, with
// outliers near ReLU's kink); statistics are fp32 (1e-4).
#include <gtest/gtest.h>

#include "bigbatch/amp/precision.h"
#include "bigbatch/models/fused_batch_norm.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/models/resnet.h"

namespace bigbatch {
namespace {

bool runnable() { return torch::cuda::is_available() && fusedBatchNormAvailable(); }

constexpr double kTolerance = 1e-2;

void expectClose(const torch::Tensor& got, const torch::Tensor& want, double tol,
                 const std::string& what) {
  const torch::Tensor a = got.to(torch::kFloat).cpu(), b = want.to(torch::kFloat).cpu();
  const double scale = std::max(1.0, b.abs().max().item<double>());
  EXPECT_TRUE(torch::allclose(a, b, tol, tol * scale))
      << what << ": max |diff| " << (a - b).abs().max().item<double>() << " (scale " << scale << ")";
}

struct Case {
  bool add;
  int64_t n, c, h, w;  // ResNet-50's shapes at batch 256 among them
};
std::string caseName(const Case& k) {
  return std::string(k.add ? "add_" : "") + std::to_string(k.n) + "x" + std::to_string(k.c) +
         "x" + std::to_string(k.h) + "x" + std::to_string(k.w);
}
void PrintTo(const Case& k, std::ostream* os) { *os << caseName(k); }

class FusedBatchNormCuda : public ::testing::TestWithParam<Case> {};

TEST_P(FusedBatchNormCuda, MatchesTheUnfusedLayersForwardAndBackward) {
  if (!runnable()) GTEST_SKIP() << "no CUDA device, or a build without the cuDNN kernels";
  const Case k = GetParam();
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(3);
  const int64_t n = k.n, c = k.c, h = k.h, w = k.w;
  auto options = torch::nn::BatchNorm2dOptions(c).momentum(0.1).eps(1e-5);
  torch::nn::BatchNorm2d fused(options), plain(options);
  fused->to(gpu);
  plain->to(gpu);
  {
    torch::NoGradGuard noGrad;
    fused->weight.uniform_(0.5, 1.5);
    fused->bias.uniform_(-0.5, 0.5);
    plain->weight.copy_(fused->weight);
    plain->bias.copy_(fused->bias);
  }
  const auto cl = at::MemoryFormat::ChannelsLast;
  const auto half = torch::kHalf;
  const torch::Tensor x0 = (torch::randn({n, c, h, w}, gpu) * 2 + 0.3).to(half).contiguous(cl);
  const torch::Tensor z0 = torch::randn({n, c, h, w}, gpu).to(half).contiguous(cl);
  const torch::Tensor dy = torch::randn({n, c, h, w}, gpu).to(half).contiguous(cl);
  torch::Tensor x1 = x0.clone().requires_grad_(), z1 = z0.clone().requires_grad_();
  torch::Tensor x2 = x0.clone().requires_grad_(), z2 = z0.clone().requires_grad_();

  const torch::Tensor got = batchNormRelu(*fused, x1, k.add ? z1 : torch::Tensor());
  ASSERT_TRUE(got.defined()) << "cuDNN refused to fuse [" << n << ", " << c << ", " << h << ", "
                             << w << "]" << (k.add ? " with the add" : "");
  EXPECT_EQ(got.scalar_type(), half);
  EXPECT_TRUE(got.is_contiguous(cl));
  torch::Tensor want = plain(x2);
  if (k.add) want = want + z2;
  want = torch::relu(want);
  got.backward(dy);
  want.backward(dy);

  const double tol = kTolerance;
  expectClose(got, want, tol, "y");
  expectClose(x1.grad(), x2.grad(), tol, "dx");
  if (k.add) expectClose(z1.grad(), z2.grad(), tol, "dz");
  expectClose(fused->weight.grad(), plain->weight.grad(), tol, "dgamma");
  expectClose(fused->bias.grad(), plain->bias.grad(), tol, "dbeta");
  expectClose(fused->running_mean, plain->running_mean, 1e-4, "running_mean");
  expectClose(fused->running_var, plain->running_var, 1e-4, "running_var");
  EXPECT_EQ(fused->num_batches_tracked.item<int64_t>(), plain->num_batches_tracked.item<int64_t>());
}

// A small shape, then ResNet-50's at batch 256: the stem's BatchNorm+ReLU
// (64 x 112 x 112), a stage-1 bottleneck's inner one (64 x 56 x 56) and its
// BatchNorm+add+ReLU (256 x 56 x 56), and the last stage's (2048 x 7 x 7).
INSTANTIATE_TEST_SUITE_P(Shapes, FusedBatchNormCuda,
                         ::testing::Values(Case{false, 32, 64, 28, 28}, Case{true, 32, 64, 28, 28},
                                           Case{false, 256, 64, 112, 112},
                                           Case{false, 256, 64, 56, 56},
                                           Case{true, 256, 256, 56, 56},
                                           Case{true, 256, 2048, 7, 7}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return caseName(info.param);
                         });

TEST(FusedBatchNormCuda, FallsBackWhereItCannotFuse) {
  if (!runnable()) GTEST_SKIP() << "no CUDA device, or a build without the cuDNN kernels";
  const torch::Device gpu(torch::kCUDA, 0);
  torch::nn::BatchNorm2d bn(torch::nn::BatchNorm2dOptions(8));
  bn->to(gpu);
  const auto cl = at::MemoryFormat::ChannelsLast;
  const torch::Tensor half = torch::randn({4, 8, 6, 6}, gpu).to(torch::kHalf);
  EXPECT_FALSE(batchNormRelu(*bn, half.to(torch::kFloat).contiguous(cl)).defined());  // fp32
  EXPECT_FALSE(batchNormRelu(*bn, half).defined());                                   // NCHW
  bn->eval();
  EXPECT_FALSE(batchNormRelu(*bn, half.contiguous(cl)).defined());  // evaluation mode
  bn->train();
  EXPECT_FALSE(batchNormRelu(*bn, half.cpu().contiguous(cl)).defined());  // CPU
  EXPECT_FALSE(batchNormRelu(*bn, half.to(torch::kBFloat16).contiguous(cl)).defined());  // bf16
  EXPECT_TRUE(batchNormRelu(*bn, half.contiguous(cl)).defined());  // the control: fp16 NHWC
}

// A ResNet-50 bottleneck (with its projection shortcut) fused and unfused,
// the same weights, under fp16 and bf16 autocast, channels-last.
TEST(FusedBatchNormCuda, ABottleneckMatchesItsUnfusedTwin) {
  if (!runnable()) GTEST_SKIP() << "no CUDA device, or a build without the cuDNN kernels";
  const torch::Device gpu(torch::kCUDA, 0);
  for (const auto dtype : {torch::kHalf, torch::kBFloat16}) {
    ModelOptions o;
    o.name = "resnet50";
    o.zeroInitResidual = false;
    torch::manual_seed(5);
    Bottleneck plain(256, 128, 2, o);
    o.fusedBatchNorm = true;
    Bottleneck fused(256, 128, 2, o);
    {
      torch::NoGradGuard noGrad;
      const auto a = plain->parameters(), b = fused->parameters();
      for (size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
    }
    for (auto* m : {&plain, &fused}) {
      (*m)->to(gpu);
      for (auto& p : (*m)->parameters()) {
        if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
      }
    }
    const torch::Tensor x0 =
        torch::randn({16, 256, 28, 28}, gpu).contiguous(at::MemoryFormat::ChannelsLast);
    torch::Tensor outs[2], grads[2];
    const int64_t casesBefore = fusedBatchNormCases();
    int i = 0;
    for (auto* m : {&plain, &fused}) {
      torch::Tensor x = x0.clone().requires_grad_();
      torch::Tensor y;
      {
        const AutocastScope autocast(dtype == torch::kHalf ? Precision::kFp16 : Precision::kBf16,
                                     c10::DeviceType::CUDA);
        y = (*m)->forward(x);
      }
      y.to(torch::kFloat).pow(2).mean().backward();
      outs[i] = y.detach();
      grads[i] = x.grad();
      ++i;
    }
    if (dtype == torch::kHalf) {  // the fused twin fused (its shapes are new here)
      EXPECT_GT(fusedBatchNormCases(), casesBefore) << "the fp16 bottleneck fused nothing";
    } else {
      EXPECT_EQ(fusedBatchNormCases(), casesBefore) << "bf16 fused";
    }
    const double tol = dtype == torch::kHalf ? kTolerance : 5e-2;  // bf16: 2^-7 relative
    expectClose(outs[1], outs[0], tol, "bottleneck y");
    expectClose(grads[1], grads[0], tol, "bottleneck dx");
    const auto a = plain->parameters(), b = fused->parameters();
    for (size_t k = 0; k < a.size(); ++k) {
      expectClose(b[k].grad(), a[k].grad(), tol, "parameter " + std::to_string(k));
    }
  }
}

}  // namespace
}  // namespace bigbatch
