// The fused BatchNorm+ReLU and BatchNorm+add+ReLU (cuDNN; CUDA build, label
// "cuda") against the unfused layers on the same weights and inputs, in
// fp16 and bf16, channels-last: outputs, the gradients of x, z, γ and β,
// and the running statistics, each within the 16-bit type's rounding —
// and a ResNet-50 bottleneck built with and without fusion, forward and
// backward under autocast. Tolerances: the fused kernel and ATen's sum the
// statistics in other orders and round the output once instead of three
// times (BatchNorm, add, ReLU each rounded to 16 bits), so outputs agree to
// a few 16-bit ulps (fp16 2^-10, bf16 2^-7 relative: atol/rtol 1e-2 and
// 5e-2 with outliers near ReLU's kink); statistics are fp32 (1e-4).
#include <gtest/gtest.h>

#include "bigbatch/amp/precision.h"
#include "bigbatch/models/fused_batch_norm.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/models/resnet.h"

namespace bigbatch {
namespace {

bool runnable() { return torch::cuda::is_available() && fusedBatchNormAvailable(); }

double tolerance(torch::ScalarType t) { return t == torch::kBFloat16 ? 5e-2 : 1e-2; }

void expectClose(const torch::Tensor& got, const torch::Tensor& want, double tol,
                 const std::string& what) {
  const torch::Tensor a = got.to(torch::kFloat).cpu(), b = want.to(torch::kFloat).cpu();
  const double scale = std::max(1.0, b.abs().max().item<double>());
  EXPECT_TRUE(torch::allclose(a, b, tol, tol * scale))
      << what << ": max |diff| " << (a - b).abs().max().item<double>() << " (scale " << scale << ")";
}

struct Case {
  torch::ScalarType dtype;
  bool add;
};

class FusedBatchNormCuda : public ::testing::TestWithParam<Case> {};

TEST_P(FusedBatchNormCuda, MatchesTheUnfusedLayersForwardAndBackward) {
  if (!runnable()) GTEST_SKIP() << "no CUDA device, or a build without the cuDNN kernels";
  const Case k = GetParam();
  const torch::Device gpu(torch::kCUDA, 0);
  torch::manual_seed(3);
  const int64_t n = 32, c = 64, h = 28, w = 28;
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
  const torch::Tensor x0 = (torch::randn({n, c, h, w}, gpu) * 2 + 0.3).to(k.dtype).contiguous(cl);
  const torch::Tensor z0 = torch::randn({n, c, h, w}, gpu).to(k.dtype).contiguous(cl);
  const torch::Tensor dy = torch::randn({n, c, h, w}, gpu).to(k.dtype).contiguous(cl);
  torch::Tensor x1 = x0.clone().requires_grad_(), z1 = z0.clone().requires_grad_();
  torch::Tensor x2 = x0.clone().requires_grad_(), z2 = z0.clone().requires_grad_();

  const torch::Tensor got = batchNormRelu(*fused, x1, k.add ? z1 : torch::Tensor());
  ASSERT_TRUE(got.defined()) << "cuDNN refused to fuse " << c10::toString(k.dtype);
  EXPECT_EQ(got.scalar_type(), k.dtype);
  EXPECT_TRUE(got.is_contiguous(cl));
  torch::Tensor want = plain(x2);
  if (k.add) want = want + z2;
  want = torch::relu(want);
  got.backward(dy);
  want.backward(dy);

  const double tol = tolerance(k.dtype);
  expectClose(got, want, tol, "y");
  expectClose(x1.grad(), x2.grad(), tol, "dx");
  if (k.add) expectClose(z1.grad(), z2.grad(), tol, "dz");
  expectClose(fused->weight.grad(), plain->weight.grad(), tol, "dgamma");
  expectClose(fused->bias.grad(), plain->bias.grad(), tol, "dbeta");
  expectClose(fused->running_mean, plain->running_mean, 1e-4, "running_mean");
  expectClose(fused->running_var, plain->running_var, 1e-4, "running_var");
  EXPECT_EQ(fused->num_batches_tracked.item<int64_t>(), plain->num_batches_tracked.item<int64_t>());
}

INSTANTIATE_TEST_SUITE_P(Types, FusedBatchNormCuda,
                         ::testing::Values(Case{torch::kHalf, false}, Case{torch::kHalf, true},
                                           Case{torch::kBFloat16, false},
                                           Case{torch::kBFloat16, true}));

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
    expectClose(outs[1], outs[0], tolerance(dtype), "bottleneck y");
    expectClose(grads[1], grads[0], tolerance(dtype), "bottleneck dx");
    const auto a = plain->parameters(), b = fused->parameters();
    for (size_t k = 0; k < a.size(); ++k) {
      expectClose(b[k].grad(), a[k].grad(), tolerance(dtype), "parameter " + std::to_string(k));
    }
  }
}

}  // namespace
}  // namespace bigbatch
