#include "step/classification_loss.h"

#include <ATen/Context.h>

#include "bigbatch/common/error.h"

namespace bigbatch::train_detail {

torch::Tensor crossEntropySumBySmoothedTargets(const torch::Tensor& logits,
                                               const torch::Tensor& labels, double labelSmoothing) {
  const int64_t classes = logits.size(1);
  // A label outside the classes would add nothing to the loss (its one-hot
  // row is all zeros): refused, as nll_loss refuses it — on a GPU by a
  // device-side assert (no host sync in the step), on the CPU here.
  const torch::Tensor inRange = labels.ge(0).logical_and(labels.lt(classes)).all();
  if (logits.is_cuda()) {
    at::_assert_async(inRange);
  } else {
    BIGBATCH_REQUIRE(inRange.item<bool>(), InvalidArgument,
                     "a label outside the model's {} classes (0..{}): the data's labels and "
                     "model.classes disagree",
                     classes, classes - 1);
  }
  const torch::Tensor classIds = torch::arange(classes, labels.options()).unsqueeze(0);
  const torch::Tensor oneHot = labels.unsqueeze(1).eq(classIds).to(logits.scalar_type());
  // PyTorch's label smoothing: (1 − ε) on the label, ε / C on every class.
  const torch::Tensor target =
      oneHot * (1.0 - labelSmoothing) + labelSmoothing / static_cast<double>(classes);
  return -(torch::log_softmax(logits, 1) * target).sum();
}

torch::Tensor crossEntropySum(const torch::Tensor& logits, const torch::Tensor& labels,
                              double labelSmoothing) {
  if (logits.is_cuda() && at::globalContext().deterministicAlgorithms()) {
    return crossEntropySumBySmoothedTargets(logits, labels, labelSmoothing);
  }
  return torch::nn::functional::cross_entropy(logits, labels,
                                              torch::nn::functional::CrossEntropyFuncOptions()
                                                  .label_smoothing(labelSmoothing)
                                                  .reduction(torch::kSum));
}

}  // namespace bigbatch::train_detail
