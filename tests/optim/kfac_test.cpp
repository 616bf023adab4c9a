// K-FAC: the factors are averages of the recorded rows' outer products (the
// output gradients unscaled), folded into running averages; the gradient
// becomes (G + γ_G I)⁻¹ ∇ (A + γ_A I)⁻¹ with γ relative to each factor's
// mean eigenvalue, rescaled to ∇'s norm — checked against a float64 solve
// written from that formula; a non-finite gradient stays non-finite.
// Statistics from two "ranks" summed equal those of one seeing all
// rows; non-finite or empty statistics leave the factors alone; the state
// round-trips through the optimizer.
#include <gtest/gtest.h>

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
