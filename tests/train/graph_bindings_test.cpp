// A captured step's check before each replay (src/train/step/graph_bindings.h):
// tensors written in place pass; a tensor whose storage was replaced, whose
// shape changed, that became defined, or a different set of tensors, is
// named. On the CPU: the check is about addresses, not about the GPU.
#include "step/graph_bindings.h"

#include <gtest/gtest.h>

namespace bigbatch::train_detail {
namespace {

TEST(GraphBindings, InPlaceWritesKeepTheBindingAndAMovedTensorIsNamed) {
  torch::Tensor w = torch::ones({4, 4}), b = torch::zeros({4});
  auto named = [&](torch::Tensor labels = torch::Tensor()) {
    return GraphBindings::Named{{"fc.weight", w}, {"fc.bias", b}, {"labels", labels}};
  };
  const GraphBindings bound(named());
  EXPECT_EQ(bound.changed(named()), "");
  // What a step does: in place.
  w.mul_(2);
  b.copy_(torch::ones({4}));
  EXPECT_EQ(bound.changed(named()), "");
  // A parameter's storage replaced (as a load that assigns .data does).
  w.set_data(torch::ones({4, 4}));
  EXPECT_EQ(bound.changed(named()), "the storage of fc.weight moved");
}

TEST(GraphBindings, ShapeDefinednessAndTheSetOfTensorsAreChecked) {
  torch::Tensor w = torch::ones({4, 4}), b = torch::zeros({4});
  const GraphBindings bound(GraphBindings::Named{{"fc.weight", w}, {"fc.bias", b}});
  b.resize_({2});  // smaller: the same storage, another shape
  EXPECT_EQ(bound.changed({{"fc.weight", w}, {"fc.bias", b}}), "fc.bias changed shape or type");
  EXPECT_EQ(bound.changed({{"fc.weight", w}}), "2 tensor(s) were captured, 1 are bound now");
  EXPECT_EQ(bound.changed({{"fc.bias", b}, {"fc.weight", w}}),
            "tensor 0 is fc.bias now, captured as fc.weight");
  const GraphBindings empty(GraphBindings::Named{{"labels", torch::Tensor()}});
  EXPECT_EQ(empty.changed({{"labels", torch::zeros({2})}}), "labels is defined now");
}

}  // namespace
}  // namespace bigbatch::train_detail
