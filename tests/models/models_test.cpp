// Model shapes, PyTorch-style names, and ResNet-50's exact size.
#include <gtest/gtest.h>

#include "bigbatch/common/error.h"
#include "bigbatch/models/model_options.h"

namespace bigbatch {
namespace {

std::vector<std::string> names(torch::nn::Module& m, bool buffers) {
  std::vector<std::string> out;
  if (buffers) {
    for (const auto& item : m.named_buffers()) out.push_back(item.key());
  } else {
    for (const auto& item : m.named_parameters()) out.push_back(item.key());
  }
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(Models, SmallCnnShapesAndNames) {
  ModelOptions o;  // cnn [16,32,64] x [2,2,1]
  auto m = buildModel(o);
  EXPECT_EQ(m->forward(torch::randn({3, 1, 28, 28})).sizes(), (std::vector<int64_t>{3, 10}));
  auto p = names(*m, false);
  EXPECT_TRUE(contains(p, "conv1.weight"));
  EXPECT_TRUE(contains(p, "bn5.bias"));
  EXPECT_TRUE(contains(p, "fc.weight"));
  EXPECT_FALSE(contains(p, "conv6.weight"));
  EXPECT_TRUE(contains(names(*m, true), "bn1.running_mean"));
  EXPECT_EQ(countParameters(*m), 35674);  // the same net in PyTorch has 35,674
}

TEST(Models, SmallCnnHeadPoolFeedsTheClassifierAGridOfFeatures) {
  // libtorch's C++ generator starts from a nondeterministic seed.
  torch::manual_seed(3);
  ModelOptions o;
  o.headPool = 3;  // configs/fast.toml: the 7x7 map pooled to 3x3
  auto m = buildModel(o);
  EXPECT_EQ(m->forward(torch::randn({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  auto* fc = m->named_parameters().find("fc.weight");
  ASSERT_NE(fc, nullptr);
  EXPECT_EQ(fc->sizes(), (std::vector<int64_t>{10, 64 * 9}));
  EXPECT_EQ(countParameters(*m), 35674 + 10 * 64 * 8);  // PyTorch's twin: 40,794
  // The classifier sees position: with fc reading only the top-left cell
  // of channel 0, an input change confined to the bottom-right leaves that
  // logit's input alone (global pooling, 1x1, would mix the whole map).
  torch::NoGradGuard noGrad;
  m->eval();
  fc->zero_();
  fc->index_put_({0, 0}, 1.0);  // logit 0 = channel 0's cell (0, 0) (channel-major flatten)
  m->named_parameters().find("fc.bias")->zero_();
  torch::Tensor a = torch::randn({1, 1, 28, 28});
  torch::Tensor b = a.clone();
  // Cell (0, 0) pools map rows and columns 0-2, whose receptive field
  // (five 3x3 convolutions, two 2x2 pools) ends at input row/column 21.
  b.narrow(2, 22, 6).narrow(3, 22, 6).add_(5.0);
  EXPECT_FLOAT_EQ(m->forward(a)[0][0].item<float>(), m->forward(b)[0][0].item<float>());
  // Read from the bottom-right cell (2, 2) instead, the same change shows —
  // summed over every channel: one channel's cell may be 0 after the ReLU
  // for both inputs (1 seed in ~30 left channel 0 so).
  fc->zero_();
  for (int64_t c = 0; c < 64; ++c) fc->index_put_({0, c * 9 + 8}, 1.0);
  EXPECT_NE(m->forward(a)[0][0].item<float>(), m->forward(b)[0][0].item<float>());
  o.headPool = 0;
  EXPECT_THROW(buildModel(o), InvalidArgument);
}

TEST(Models, SmallResNetShapesNamesAndZeroInit) {
  ModelOptions o;
  o.name = "resnet";
  o.widths = {8, 16};
  o.blocks = {2, 1};
  auto m = buildModel(o);
  EXPECT_EQ(m->forward(torch::randn({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  auto p = names(*m, false);
  for (const char* n : {"conv1.weight", "bn1.weight", "layer1.0.conv1.weight", "layer1.1.bn2.bias",
                        "layer2.0.downsample.0.weight", "layer2.0.downsample.1.weight", "fc.bias"}) {
    EXPECT_TRUE(contains(p, n)) << n;
  }
  EXPECT_TRUE(contains(names(*m, true), "layer2.0.bn1.running_var"));
  for (const auto& item : m->named_parameters()) {
    if (item.key().find(".bn2.weight") != std::string::npos) {
      EXPECT_EQ(item.value().abs().sum().item<double>(), 0.0) << item.key();
    }
  }
}

TEST(Models, ResNet50IsTorchvisionSized) {
  ModelOptions o;
  o.name = "resnet50";
  o.inChannels = 3;
  o.numClasses = 1000;
  auto m = buildModel(o);
  // torchvision.models.resnet50(): 25,557,032 parameters in 161 tensors.
  EXPECT_EQ(countParameters(*m), 25557032);
  EXPECT_EQ(m->parameters().size(), 161u);
  auto p = names(*m, false);
  EXPECT_TRUE(contains(p, "layer4.2.conv3.weight"));
  EXPECT_TRUE(contains(p, "layer3.0.downsample.1.bias"));
  // v1.5: the stride sits on the 3x3 conv.
  torch::NoGradGuard g;
  m->eval();
  EXPECT_EQ(m->forward(torch::randn({1, 3, 64, 64})).sizes(), (std::vector<int64_t>{1, 1000}));
}

TEST(Models, SameSeedSameWeights) {
  ModelOptions o;
  torch::manual_seed(7);
  auto a = buildModel(o);
  torch::manual_seed(7);
  auto b = buildModel(o);
  auto pa = a->parameters(), pb = b->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(torch::equal(pa[i], pb[i]));
}

}  // namespace
}  // namespace bigbatch
