// SGD against the PyTorch update rule written out in double precision.
#include <gtest/gtest.h>

#include "bigbatch/optim/sgd.h"

namespace bigbatch {
namespace {

// Two steps of SGD on one weight matrix and one bias, compared with the
// formulas evaluated in double: fp32 rounding of a few multiply-adds stays far
// below 1e-6 relative.
TEST(Sgd, MatchesFormulaWithNesterovAndExclusions) {
  for (bool nesterov : {false, true}) {
    torch::Tensor w = torch::tensor({{1.0f, -2.0f}, {0.5f, 3.0f}}).requires_grad_();
    torch::Tensor b = torch::tensor({0.25f, -0.75f}).requires_grad_();
    SgdOptions o;
    o.momentum = 0.9;
    o.weightDecay = 0.1;
    o.nesterov = nesterov;
    Sgd opt({w, b}, o);
    torch::Tensor rw = w.detach().to(torch::kFloat64), rb = b.detach().to(torch::kFloat64);
    torch::Tensor vw = torch::zeros_like(rw), vb = torch::zeros_like(rb);
    const double lrs[] = {0.5, 0.25};
    for (double lr : lrs) {
      torch::Tensor gw = torch::tensor({{0.1, 0.2}, {-0.3, 0.4}}, torch::kFloat64);
      torch::Tensor gb = torch::tensor({1.0, -1.0}, torch::kFloat64);
      w.mutable_grad() = gw.to(torch::kFloat32);
      b.mutable_grad() = gb.to(torch::kFloat32);
      opt.step(lr);
      torch::Tensor dw = gw + 0.1 * rw;  // weight decay on the matrix only
      vw = 0.9 * vw + dw;
      vb = 0.9 * vb + gb;
      rw = rw - lr * (nesterov ? dw + 0.9 * vw : vw);
      rb = rb - lr * (nesterov ? gb + 0.9 * vb : vb);
    }
    EXPECT_TRUE(torch::allclose(w.detach().to(torch::kFloat64), rw, 1e-6, 1e-7)) << nesterov;
    EXPECT_TRUE(torch::allclose(b.detach().to(torch::kFloat64), rb, 1e-6, 1e-7)) << nesterov;
  }
}

TEST(Sgd, ZeroGradKeepsStorage) {
  torch::Tensor w = torch::ones({4}).requires_grad_();
  w.mutable_grad() = torch::ones({4});
  void* before = w.grad().data_ptr();
  Sgd opt({w}, SgdOptions{});
  opt.zeroGrad();
  EXPECT_EQ(w.grad().data_ptr(), before);
  EXPECT_EQ(w.grad().abs().sum().item<float>(), 0.f);
}

}  // namespace
}  // namespace bigbatch
