// K-FAC: the factors are averages of the recorded rows' outer products (the
// output gradients unscaled), folded into running averages; the gradient
// becomes (G + γ_G I)⁻¹ ∇ (A + γ_A I)⁻¹ with γ relative to each factor's
// mean eigenvalue, rescaled to ∇'s norm — checked against a float64 solve
// written from that formula; a non-finite gradient stays non-finite.
// Statistics from two "ranks" summed equal those of one seeing all
// rows; non-finite or empty statistics leave the factors alone; the state
// round-trips through the optimizer; layers too large for the factor bound
// (ResNet-50's) keep their plain gradient at a stated cost.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "bigbatch/common/error.h"
#include "bigbatch/optim/kfac_preconditioner.h"
#include "bigbatch/optim/optimizer.h"

namespace bigbatch {
namespace {

torch::Tensor damped(const torch::Tensor& f, double damping) {
  const int64_t n = f.size(0);
  return f + damping * f.trace().item<double>() / n * torch::eye(n, f.options());
}

// (G + γ_G I)⁻¹ ∇ (A + γ_A I)⁻¹ in float64 by two linear solves, at the
// length of ∇.
torch::Tensor reference(const torch::Tensor& a, const torch::Tensor& g, const torch::Tensor& grad,
                        double damping) {
  const torch::Tensor g64 = grad.to(torch::kDouble);
  const torch::Tensor left = torch::linalg_solve(damped(g, damping), g64);
  // X·A_d⁻¹ = (A_d⁻¹·Xᵀ)ᵀ, A_d symmetric.
  const torch::Tensor p = torch::linalg_solve(damped(a, damping), left.t()).t();
  return p * (g64.norm() / p.norm());  // the gradient's length
}

struct Layer {
  torch::Tensor w;
  torch::Tensor inputs, gradients;  // rows
};

Layer makeLayer(std::vector<int64_t> shape, int64_t rows) {
  Layer l;
  l.w = torch::randn(shape).requires_grad_(true);
  const int64_t out = shape[0], in = l.w.numel() / out;
  l.inputs = torch::randn({rows, in});
  l.gradients = torch::randn({rows, out}) * 1e-3;  // scaled as by a loss factor
  l.w.mutable_grad() = torch::randn(shape);
  return l;
}

TEST(Kfac, PreconditionsWithTheDampedFactorInverses) {
  torch::manual_seed(1);
  Layer conv = makeLayer({4, 3, 3, 3}, 200);  // A 27x27, G 4x4
  Layer fc = makeLayer({5, 6}, 40);
  KfacOptions o;
  o.damping = 0.05;
  KfacPreconditioner k({{"conv.weight", conv.w}, {"fc.weight", fc.w}}, o);
  ASSERT_EQ(k.layers(), 2u);
  EXPECT_TRUE(k.covers(conv.w));
  EXPECT_FALSE(k.covers(torch::randn({4, 3, 3, 3})));
  for (Layer* l : {&conv, &fc}) {
    // Two calls, as two tapped passes of one step would make.
    const int64_t half = l->inputs.size(0) / 2;
    k.addActivations(l->w, l->inputs.slice(0, 0, half));
    k.addActivations(l->w, l->inputs.slice(0, half));
    k.addOutputGradients(l->w, l->gradients.slice(0, 0, half));
    k.addOutputGradients(l->w, l->gradients.slice(0, half));
  }
  const double unscale = 1000;
  k.update(k.takeStatistics(), unscale);
  std::vector<torch::Tensor> expected;
  for (Layer* l : {&conv, &fc}) {
    const torch::Tensor x = l->inputs.to(torch::kDouble), y = l->gradients.to(torch::kDouble);
    const double m = static_cast<double>(x.size(0));
    const torch::Tensor a = x.t().mm(x) / m;
    const torch::Tensor g = y.t().mm(y) * (unscale * unscale / m);
    expected.push_back(
        reference(a, g, l->w.grad().reshape({l->w.size(0), -1}), o.damping).view(l->w.sizes()));
  }
  k.precondition();
  int i = 0;
  for (Layer* l : {&conv, &fc}) {
    const torch::Tensor got = l->w.grad().to(torch::kDouble);
    EXPECT_TRUE(torch::allclose(got, expected[i], 1e-5, 1e-7))
        << "layer " << i << ": max relative difference "
        << ((got - expected[i]).abs().max() / expected[i].abs().max()).item<double>();
    ++i;
  }
  // An overflowed gradient must still be seen as one by the optimizer.
  conv.w.mutable_grad()[0][0][0][0] = std::numeric_limits<float>::infinity();
  k.precondition();
  EXPECT_FALSE(conv.w.grad().isfinite().all().item<bool>());
}

TEST(Kfac, TwoRanksSummedEqualOneRankWithAllRows) {
  torch::manual_seed(2);
  Layer l = makeLayer({3, 4}, 30);
  const torch::Tensor grad = l.w.grad().clone();
  KfacPreconditioner one({{"w", l.w}}, KfacOptions{});
  one.addActivations(l.w, l.inputs);
  one.addOutputGradients(l.w, l.gradients);
  one.update(one.takeStatistics(), 1.0);
  one.precondition();
  const torch::Tensor fromOne = l.w.grad().clone();

  l.w.mutable_grad().copy_(grad);
  KfacPreconditioner r0({{"w", l.w}}, KfacOptions{}), r1({{"w", l.w}}, KfacOptions{});
  r0.addActivations(l.w, l.inputs.slice(0, 0, 10));
  r0.addOutputGradients(l.w, l.gradients.slice(0, 0, 10));
  r1.addActivations(l.w, l.inputs.slice(0, 10));
  r1.addOutputGradients(l.w, l.gradients.slice(0, 10));
  std::vector<double> s0 = r0.takeStatistics(), s1 = r1.takeStatistics();
  ASSERT_EQ(s0.size(), 2u + 16 + 9);  // rows of A and G, A 4x4, G 3x3
  EXPECT_EQ(s0[0], 10);
  for (size_t i = 0; i < s0.size(); ++i) s0[i] += s1[i];
  r0.update(s0, 1.0);
  r0.precondition();
  // The same rows, their outer products summed in another grouping (fp32
  // products, fp64 sums): equal to float rounding.
  EXPECT_TRUE(torch::allclose(l.w.grad(), fromOne, 1e-5, 1e-6))
      << "max difference " << (l.w.grad() - fromOne).abs().max().item<double>() << " of "
      << fromOne.abs().max().item<double>();
  // The sums were cleared by takeStatistics.
  for (double v : r0.takeStatistics()) EXPECT_EQ(v, 0.0);
}

TEST(Kfac, FactorsAreRunningAveragesAndBadStepsLeaveThemAlone) {
  torch::manual_seed(3);
  Layer l = makeLayer({2, 3}, 8);
  KfacOptions o;
  o.decay = 0.75;
  KfacPreconditioner k({{"w", l.w}}, o);
  auto factorA = [&] {
    for (const auto& [name, t] : k.state()) {
      if (name == "kfac.w.A") return t.clone();
    }
    return torch::Tensor();
  };
  // Before any update: no factors, the gradient is left as it is.
  const torch::Tensor before = l.w.grad().clone();
  k.precondition();
  EXPECT_TRUE(torch::equal(l.w.grad(), before));

  const torch::Tensor x1 = torch::randn({8, 3}), x2 = torch::randn({8, 3});
  auto step = [&](const torch::Tensor& x) {
    k.addActivations(l.w, x);
    k.addOutputGradients(l.w, torch::randn({8, 2}));
    k.update(k.takeStatistics(), 1.0);
  };
  step(x1);
  const torch::Tensor a1 = x1.to(torch::kDouble).t().mm(x1.to(torch::kDouble)) / 8;
  EXPECT_TRUE(torch::allclose(factorA(), a1, 1e-6, 1e-9));  // the first step is taken whole
  step(x2);
  const torch::Tensor a2 = x2.to(torch::kDouble).t().mm(x2.to(torch::kDouble)) / 8;
  const torch::Tensor expected = 0.75 * a1 + 0.25 * a2;
  EXPECT_TRUE(torch::allclose(factorA(), expected, 1e-6, 1e-9));

  // A non-finite gradient row (an overflowed loss scale) and a step in
  // which the layer saw nothing both keep the factors.
  k.addActivations(l.w, x1);
  k.addOutputGradients(l.w, torch::full({8, 2}, std::numeric_limits<float>::infinity()));
  k.update(k.takeStatistics(), 1.0);
  EXPECT_TRUE(torch::allclose(factorA(), expected, 1e-6, 1e-9));
  k.update(k.takeStatistics(), 1.0);
  EXPECT_TRUE(torch::allclose(factorA(), expected, 1e-6, 1e-9));
}

TEST(Kfac, OptimizerCoversRegularWeightsAndItsStateRoundTrips) {
  torch::manual_seed(4);
  auto makeParams = [] {
    std::vector<NamedParameter> p;
    p.push_back({"conv.weight", torch::randn({4, 2, 3, 3}).requires_grad_(true)});
    p.push_back({"bn.weight", torch::ones({4}).requires_grad_(true)});
    p.push_back({"fc.weight", torch::randn({3, 4}).requires_grad_(true)});
    p.push_back({"fc.bias", torch::zeros({3}).requires_grad_(true)});
    for (auto& x : p) x.tensor.mutable_grad() = torch::randn_like(x.tensor);
    return p;
  };
  OptimizerOptions oo;
  oo.name = "lars";
  auto params = makeParams();
  auto opt = makeOptimizer(params, oo);
  opt->enableKfac(KfacOptions{});
  ASSERT_NE(opt->kfac(), nullptr);
  EXPECT_EQ(opt->kfac()->layers(), 2u);  // conv.weight and fc.weight; BN and bias are excluded
  EXPECT_FALSE(opt->kfac()->covers(params[1].tensor));
  KfacPreconditioner* k = opt->kfac();
  k->addActivations(params[0].tensor, torch::randn({50, 18}));
  k->addOutputGradients(params[0].tensor, torch::randn({50, 4}));
  k->addActivations(params[2].tensor, torch::randn({10, 4}));
  k->addOutputGradients(params[2].tensor, torch::randn({10, 3}));
  k->update(k->takeStatistics(), 1.0);
  const torch::Tensor biasGrad = params[3].tensor.grad().clone();
  ASSERT_TRUE(opt->step(StepHyper{1.0}).applied);
  EXPECT_TRUE(torch::equal(params[3].tensor.grad(), biasGrad));  // not covered: untouched

  // A fresh optimizer with the same state preconditions the same gradient
  // to the same bits.
  auto other = makeParams();
  auto restored = makeOptimizer(other, oo);
  restored->enableKfac(KfacOptions{});
  restored->loadState(opt->state());
  for (auto* o : {opt.get(), restored.get()}) {
    torch::manual_seed(5);
    for (const auto& p : o->params()) p.tensor.mutable_grad().copy_(torch::randn_like(p.tensor));
    o->kfac()->precondition();
  }
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(torch::equal(params[i].tensor.grad(), other[i].tensor.grad())) << params[i].name;
  }
  // An optimizer without K-FAC refuses a state that has its factors, by name.
  auto plain = makeOptimizer(makeParams(), oo);
  try {
    plain->loadState(opt->state());
    FAIL() << "expected an InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("kfac."), std::string::npos) << e.what();
  }
}

// ResNet-50's conv and linear weights (He et al. 2016, v1.5, torchvision's
// names and shapes), each with a gradient.
std::vector<NamedParameter> resnet50Weights() {
  std::vector<NamedParameter> p;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    p.push_back({name, torch::zeros(shape).requires_grad_(true)});
  };
  add("conv1.weight", {64, 3, 7, 7});
  int64_t in = 64;
  const int64_t blocks[4] = {3, 4, 6, 3};
  for (int s = 0; s < 4; ++s) {
    const int64_t width = 64 << s, out = 4 * width;
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const std::string at = fmt::format("layer{}.{}.", s + 1, b);
      add(at + "conv1.weight", {width, in, 1, 1});
      add(at + "conv2.weight", {width, width, 3, 3});
      add(at + "conv3.weight", {out, width, 1, 1});
      if (b == 0) add(at + "downsample.0.weight", {out, in, 1, 1});
      in = out;
    }
  }
  add("fc.weight", {1000, 2048});
  add("fc.bias", {1000});
  return p;
}

// A layer costs dim A² + dim G² values of statistics per step (summed over
// the ranks) and as many of factors: ResNet-50's 3x3 convs of 512 channels
// (dim A = 4608) would cost 21 M values each. Layers with a factor over
// optim.kfac_max_dim keep their plain gradient, and the cost is stated.
TEST(Kfac, LargeLayersKeepTheirPlainGradientAndTheCostIsBounded) {
  const auto params = resnet50Weights();
  OptimizerOptions oo;
  oo.name = "lars";
  auto opt = makeOptimizer(params, oo);
  const KfacCoverage c = opt->enableKfac(KfacOptions{});  // maxDim 1024
  auto covers = [&](const std::string& name) {
    for (const auto& x : params) {
      if (x.name == name) return opt->kfac()->covers(x.tensor);
    }
    ADD_FAILURE() << "no parameter " << name;
    return false;
  };
  EXPECT_EQ(c.layers + c.tooLarge, 54);  // 53 convolutions and fc
  EXPECT_TRUE(covers("conv1.weight"));              // 147 x 64
  EXPECT_TRUE(covers("layer3.0.conv3.weight"));     // 256 x 1024
  EXPECT_FALSE(covers("layer2.0.conv2.weight"));    // dim A 3x3x128 = 1152
  EXPECT_FALSE(covers("layer4.0.conv2.weight"));    // dim A 3x3x512 = 4608
  EXPECT_FALSE(covers("fc.weight"));                // dim A 2048
  EXPECT_EQ(c.largestSkipped, "layer4.0.conv2.weight");
  // The stated cost, from the covered shapes.
  int64_t values = 0;
  for (const auto& x : params) {
    if (!opt->kfac()->covers(x.tensor)) continue;
    const int64_t g = x.tensor.size(0), a = x.tensor.numel() / g;
    EXPECT_LE(std::max(a, g), 1024) << x.name;
    values += 2 + a * a + g * g;
  }
  EXPECT_EQ(c.statisticValues, values);
  EXPECT_EQ(opt->kfac()->statisticValues(), values);
  EXPECT_EQ(c.layers, 34);
  EXPECT_EQ(values, 19'023'021);  // 152 MB in float64, not the 153.8 M (1.2 GB) of every layer
  std::cout << "ResNet-50 under K-FAC (max dim 1024): " << c.layers << " layers covered, "
            << c.tooLarge << " left plain, " << values << " statistic values per step\n";

  // A bound no layer fits is refused by name, not run with nothing covered.
  KfacOptions tiny;
  tiny.maxDim = 16;
  try {
    makeOptimizer(resnet50Weights(), oo)->enableKfac(tiny);
    FAIL() << "expected an InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("optim.kfac_max_dim = 16"), std::string::npos)
        << e.what();
  }
}

TEST(Kfac, RefusesBadOptionsAndShapesByName) {
  auto w = torch::randn({3, 4});
  KfacOptions o;
  o.damping = 0;
  EXPECT_THROW(KfacPreconditioner({{"w", w}}, o), InvalidArgument);
  o = KfacOptions{};
  o.decay = 1.0;
  EXPECT_THROW(KfacPreconditioner({{"w", w}}, o), InvalidArgument);
  try {
    KfacPreconditioner({{"bn.weight", torch::ones({3})}}, KfacOptions{});
    FAIL() << "expected an InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("bn.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bigbatch
