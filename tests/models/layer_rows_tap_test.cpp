// LayerRowsTap: the rows it hands out are what K-FAC's factors are built
// from, so their layout must match the weight's. The check that cannot be
// fooled by a consistent mistake: a layer's weight gradient is the sum over
// rows of (gradient row)·(input row)ᵀ — a wrong im2col order, a transposed
// output gradient or a missed layer breaks it.
#include "bigbatch/models/layer_rows_tap.h"

#include <gtest/gtest.h>

#include <map>

#include "bigbatch/models/model_options.h"

namespace bigbatch {
namespace {

struct Rows {
  torch::Tensor inputs, gradients;
};

// Runs forward and backward of `model` on `batch` images with every layer
// tapped for `samples` images, and returns the rows per weight.
std::map<const void*, Rows> tapAndBackward(ImageClassifierImpl& model, const torch::Tensor& images,
                                           int64_t samples) {
  std::map<const void*, Rows> rows;
  LayerRowsSink sink;
  sink.inputs = [&](const torch::Tensor& w, const torch::Tensor& r) {
    rows[w.unsafeGetTensorImpl()].inputs = r.clone();
  };
  sink.outputGradients = [&](const torch::Tensor& w, const torch::Tensor& r) {
    rows[w.unsafeGetTensorImpl()].gradients = r.clone();
  };
  LayerRowsTap tap(sink, samples);
  torch::Tensor logits;
  {
    const LayerTapScope scope(&tap);
    logits = model.forward(images);
  }
  // A loss whose gradient differs per sample and class.
  torch::manual_seed(7);
  (logits * torch::randn_like(logits)).sum().backward();
  return rows;
}

void expectRowsGiveTheWeightGradients(ImageClassifierImpl& model, const torch::Tensor& images) {
  model.zero_grad();
  const auto rows = tapAndBackward(model, images, images.size(0));
  int tapped = 0;
  for (const auto& item : model.named_parameters()) {
    const torch::Tensor& w = item.value();
    if (w.dim() != 2 && w.dim() != 4) continue;
    auto it = rows.find(w.unsafeGetTensorImpl());
    ASSERT_NE(it, rows.end()) << item.key() << " was not tapped";
    const Rows& r = it->second;
    ASSERT_TRUE(r.inputs.defined() && r.gradients.defined()) << item.key();
    ASSERT_EQ(r.inputs.size(0), r.gradients.size(0)) << item.key();
    EXPECT_EQ(r.inputs.size(1), w.numel() / w.size(0)) << item.key();
    EXPECT_EQ(r.gradients.size(1), w.size(0)) << item.key();
    const torch::Tensor fromRows = r.gradients.t().mm(r.inputs);
    const torch::Tensor grad = w.grad().reshape({w.size(0), -1});
    EXPECT_TRUE(torch::allclose(fromRows, grad, 1e-4, 1e-5))
        << item.key() << ": max difference " << (fromRows - grad).abs().max().item<double>();
    ++tapped;
  }
  EXPECT_GT(tapped, 0);
}

TEST(LayerRowsTap, SmallCnnRowsGiveEveryWeightGradient) {
  torch::manual_seed(1);
  ModelOptions o;
  o.widths = {4, 8};
  o.blocks = {2, 1};
  auto m = buildModel(o);
  expectRowsGiveTheWeightGradients(*m, torch::randn({3, 1, 12, 12}));
}

TEST(LayerRowsTap, ResNetRowsGiveEveryWeightGradientWithStridesAndShortcuts) {
  // Strided 3x3 convolutions and the 1x1 projection shortcut (padding 0).
  torch::manual_seed(2);
  ModelOptions o;
  o.name = "resnet";
  o.widths = {4, 8};
  o.blocks = {1, 1};
  o.zeroInitResidual = false;
  auto m = buildModel(o);
  expectRowsGiveTheWeightGradients(*m, torch::randn({2, 1, 9, 9}));
}

TEST(LayerRowsTap, TakesOnlyTheFirstSamplesAndNothingOutsideAScope) {
  torch::manual_seed(3);
  ModelOptions o;
  o.widths = {4};
  o.blocks = {1};
  auto m = buildModel(o);
  const auto rows = tapAndBackward(*m, torch::randn({5, 1, 6, 6}), 2);
  const auto conv = m->named_parameters()["conv1.weight"];
  const auto fc = m->named_parameters()["fc.weight"];
  EXPECT_EQ(rows.at(conv.unsafeGetTensorImpl()).inputs.size(0), 2 * 6 * 6);
  EXPECT_EQ(rows.at(conv.unsafeGetTensorImpl()).gradients.size(0), 2 * 6 * 6);
  EXPECT_EQ(rows.at(fc.unsafeGetTensorImpl()).inputs.size(0), 2);
  EXPECT_EQ(rows.at(fc.unsafeGetTensorImpl()).gradients.size(0), 2);

  // Without a scope the model calls nobody.
  int calls = 0;
  LayerRowsSink sink;
  sink.inputs = [&](const torch::Tensor&, const torch::Tensor&) { ++calls; };
  sink.outputGradients = [&](const torch::Tensor&, const torch::Tensor&) { ++calls; };
  LayerRowsTap tap(sink, 2);
  m->forward(torch::randn({2, 1, 6, 6})).sum().backward();
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace bigbatch
