// The deterministic form of the training loss (classification_loss.h)
// against ATen's cross_entropy with label smoothing: the same sum, and the
// same gradient, to float rounding.
#include "step/classification_loss.h"

#include <gtest/gtest.h>

#include "bigbatch/common/error.h"

namespace bigbatch::train_detail {
namespace {

TEST(ClassificationLoss, TheDeterministicFormAgreesWithAtensCrossEntropy) {
  torch::manual_seed(7);
  const auto logits = torch::randn({64, 10}) * 3;
  const auto labels = torch::randint(0, 10, {64}, torch::kLong);
  for (double smoothing : {0.0, 0.1, 0.3}) {
    auto a = logits.clone().requires_grad_(true);
    auto b = logits.clone().requires_grad_(true);
    const auto la = torch::nn::functional::cross_entropy(
        a, labels,
        torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(smoothing).reduction(
            torch::kSum));
    const auto lb = crossEntropySumBySmoothedTargets(b, labels, smoothing);
    // A sum of 64 terms of order 1 in fp32: relative 1e-6.
    EXPECT_NEAR(la.item<double>(), lb.item<double>(), 1e-6 * std::abs(la.item<double>()))
        << "label smoothing " << smoothing;
    la.backward();
    lb.backward();
    EXPECT_LT((a.grad() - b.grad()).abs().max().item<double>(), 1e-6);
  }
}

TEST(ClassificationLoss, ALabelOutsideTheClassesIsRefused) {
  const auto logits = torch::randn({4, 10});
  EXPECT_THROW(crossEntropySumBySmoothedTargets(logits, torch::tensor({0, 3, 10, 1}), 0.1),
               InvalidArgument);
  EXPECT_THROW(crossEntropySumBySmoothedTargets(logits, torch::tensor({0, -1, 2, 1}), 0.1),
               InvalidArgument);
}

TEST(ClassificationLoss, OnTheCpuItIsAtensOwn) {
  const auto logits = torch::randn({8, 10});
  const auto labels = torch::randint(0, 10, {8}, torch::kLong);
  const auto expected = torch::nn::functional::cross_entropy(
      logits, labels,
      torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(0.1).reduction(torch::kSum));
  EXPECT_TRUE(torch::equal(crossEntropySum(logits, labels, 0.1), expected));
}

}  // namespace
}  // namespace bigbatch::train_detail
