// ScriptedClassifier: a TorchScript module trained as one of bigbatch's own.
// The modules here are written in TorchScript from C++ (torch::jit::Module
// define()), so the unit tests need no Python; tests/apps/torchscript_test.py
// drives modules that Python scripted. The twin of the zoo's `cnn` runs the
// same ATen ops as SmallCnnImpl, so with the same weights the two must agree
// bit for bit — forward, backward and BatchNorm's running statistics.
#include "bigbatch/models/scripted_model.h"

#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/version.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/ckpt/torchscript_file.h"
#include "bigbatch/common/error.h"
#include "bigbatch/optim/optimizer.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

// A parameter as Python's modules hold them (jit::load keeps requires_grad).
torch::Tensor trainable(const torch::Tensor& t) { return t.detach().requires_grad_(); }

torch::jit::Module conv(int index, int64_t in, int64_t out) {
  torch::jit::Module m("Conv" + std::to_string(index));
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("weight", trainable(torch::randn({out, in, 3, 3}) * 0.3), false);
  m.define(R"(
def forward(self, x):
    return torch.conv2d(x, self.weight, None, [1, 1], [1, 1], [1, 1], 1)
)");
  return m;
}

// PyTorch's BatchNorm2d, as torch.jit.script writes it for momentum 0.1.
torch::jit::Module batchNorm(int index, int64_t channels) {
  torch::jit::Module m("Bn" + std::to_string(index));
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("weight", trainable(torch::ones({channels})), false);
  m.register_parameter("bias", trainable(torch::zeros({channels})), false);
  m.register_buffer("running_mean", torch::zeros({channels}));
  m.register_buffer("running_var", torch::ones({channels}));
  m.register_buffer("num_batches_tracked", torch::zeros({}, torch::kLong));
  m.define(R"(
def forward(self, x):
    if self.training:
        self.num_batches_tracked.add_(1)
    return torch.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,
                            self.training, 0.1, 1e-05, False)
)");
  return m;
}

torch::jit::Module linear(int64_t in, int64_t out) {
  torch::jit::Module m("Fc");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("weight", trainable(torch::randn({out, in}) * 0.1), false);
  m.register_parameter("bias", trainable(torch::zeros({out})), false);
  m.define(R"(
def forward(self, x):
    return torch.linear(x, self.weight, self.bias)
)");
  return m;
}

// The twin of ModelOptions{widths {4, 8}, blocks {1, 1}}: conv1-bn1-relu,
// max-pool, conv2-bn2-relu, global average pool, fc.
torch::jit::Module cnnTwin() {
  torch::jit::Module m("Twin");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_module("conv1", conv(1, 1, 4));
  m.register_module("bn1", batchNorm(1, 4));
  m.register_module("conv2", conv(2, 4, 8));
  m.register_module("bn2", batchNorm(2, 8));
  m.register_module("fc", linear(8, 10));
  m.define(R"(
def forward(self, x):
    x = torch.relu(self.bn1.forward(self.conv1.forward(x)))
    x = torch.max_pool2d(x, [2, 2])
    x = torch.relu(self.bn2.forward(self.conv2.forward(x)))
    x = torch.adaptive_avg_pool2d(x, [1, 1]).flatten(1)
    return self.fc.forward(x)
)");
  return m;
}

ModelOptions twinOptions() {
  ModelOptions o;
  o.widths = {4, 8};
  o.blocks = {1, 1};
  return o;
}

class ScriptedModel : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bigbatch-scripted-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    torch::manual_seed(3);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string save(const torch::jit::Module& m, const std::string& name) {
    const std::string path = (dir_ / name).string();
    m.save(path);
    return path;
  }
  // A zip archive with exactly these records, as PyTorch's writer makes them.
  std::string archive(const std::string& name, const std::vector<std::string>& records) {
    const std::string path = (dir_ / name).string();
    caffe2::serialize::PyTorchStreamWriter writer(path);
    for (const auto& r : records) writer.writeRecord(r, "x", 1);
    writer.writeEndOfFile();
    return path;
  }
  std::string refusal(const std::string& path) {
    try {
      ScriptedClassifierImpl model(path);
      model.checkLogits(1, 28, 28, 10);
    } catch (const InvalidArgument& e) {
      return e.what();
    } catch (const IoError& e) {
      return e.what();
    }
    return "(accepted)";
  }

  fs::path dir_;
};

std::map<std::string, std::vector<int64_t>> shapes(torch::nn::Module& m) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const auto& p : m.named_parameters()) out[p.key()] = p.value().sizes().vec();
  for (const auto& b : m.named_buffers()) out["buffer " + b.key()] = b.value().sizes().vec();
  return out;
}

TEST_F(ScriptedModel, HasTheNamesAndShapesOfItsNativeTwin) {
  ScriptedClassifierImpl scripted(save(cnnTwin(), "twin.pt"));
  auto native = buildModel(twinOptions());
  EXPECT_EQ(shapes(scripted), shapes(*native));
  std::vector<std::string> order, nativeOrder;  // bucket order follows registration
  for (const auto& p : scripted.named_parameters()) order.push_back(p.key());
  for (const auto& p : native->named_parameters()) nativeOrder.push_back(p.key());
  EXPECT_EQ(order, nativeOrder);
}

// Same weights, same batch: identical logits, gradients and running
// statistics after a training-mode step — the TorchScript code updates the
// very tensors the module registers.
TEST_F(ScriptedModel, TrainsBitForBitAsItsNativeTwin) {
  ScriptedClassifierImpl scripted(save(cnnTwin(), "twin.pt"));
  auto native = buildModel(twinOptions());
  c10::Dict<std::string, at::Tensor> weights;
  for (const auto& p : scripted.named_parameters()) weights.insert(p.key(), p.value());
  for (const auto& b : scripted.named_buffers()) weights.insert(b.key(), b.value());
  loadStateDict(*native, weights, "the scripted twin");

  const torch::Tensor images = torch::randn({6, 1, 28, 28});
  const torch::Tensor labels = torch::randint(0, 10, {6});
  for (auto* m : std::vector<ImageClassifierImpl*>{&scripted, native.get()}) {
    m->train();
    torch::nn::functional::cross_entropy(m->forward(images), labels).backward();
  }
  auto sp = scripted.named_parameters();
  auto np = native->named_parameters();
  for (const auto& p : sp) {
    EXPECT_TRUE(torch::equal(p.value().grad(), np[p.key()].grad())) << p.key();
  }
  auto sb = scripted.named_buffers();
  auto nb = native->named_buffers();
  for (const auto& b : sb) EXPECT_TRUE(torch::equal(b.value(), nb[b.key()])) << b.key();
  EXPECT_EQ(sb["bn1.num_batches_tracked"].item<int64_t>(), 1);

  // An optimizer step on the registered tensors is what the code sees next.
  torch::NoGradGuard noGrad;
  for (auto& p : scripted.parameters()) p.sub_(p.grad() * 0.1);
  for (auto& p : native->parameters()) p.sub_(p.grad() * 0.1);
  scripted.eval();
  native->eval();
  EXPECT_TRUE(torch::equal(scripted.forward(images), native->forward(images)));
}

TEST_F(ScriptedModel, ChannelsLastAndDeviceMovesReachTheCode) {
  ScriptedClassifierImpl scripted(save(cnnTwin(), "twin.pt"));
  torch::NoGradGuard noGrad;
  for (auto& p : scripted.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
  const torch::Tensor inCode = scripted.module().attr("conv1").toModule().attr("weight").toTensor();
  EXPECT_TRUE(inCode.is_contiguous(at::MemoryFormat::ChannelsLast));
}

// A module whose code assigns a new tensor to a buffer, instead of updating
// it in place, still has its registered buffer follow.
TEST_F(ScriptedModel, TakesBackABufferTheCodeReplaces) {
  torch::jit::Module m("Counting");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("weight", trainable(torch::randn({10, 784}) * 0.01), false);
  m.register_buffer("seen", torch::zeros({}));
  m.define(R"(
def forward(self, x):
    self.seen = self.seen + x.size(0)
    return torch.linear(x.flatten(1), self.weight)
)");
  ScriptedClassifierImpl scripted(save(m, "counting.pt"));
  scripted.forward(torch::zeros({3, 1, 28, 28}));
  scripted.forward(torch::zeros({4, 1, 28, 28}));
  EXPECT_EQ(scripted.named_buffers()["seen"].item<float>(), 7.0f);
}

// One submodule used twice (tied weights): one parameter, as PyTorch's
// named_parameters() lists it, so DDP hooks and sums it once.
TEST_F(ScriptedModel, RegistersATensorReachableTwiceOnce) {
  torch::jit::Module shared = linear(784, 10);
  torch::jit::Module m("Tied");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_module("first", shared);
  m.register_module("second", shared);
  m.define(R"(
def forward(self, x):
    return self.first.forward(x.flatten(1)) + self.second.forward(x.flatten(1))
)");
  ScriptedClassifierImpl scripted(save(m, "tied.pt"));
  std::vector<std::string> names;
  for (const auto& p : scripted.named_parameters()) names.push_back(p.key());
  EXPECT_EQ(names, (std::vector<std::string>{"first.weight", "first.bias"}));
  torch::nn::functional::cross_entropy(scripted.forward(torch::randn({4, 1, 28, 28})),
                                       torch::randint(0, 10, {4}))
      .backward();
  EXPECT_TRUE(scripted.named_parameters()["first.weight"].grad().defined());
}

// A frozen parameter (fine-tuning the rest) is held as a buffer: saved and
// checksummed under its name, neither trained nor exchanged.
TEST_F(ScriptedModel, HoldsAFrozenParameterAsABuffer) {
  torch::jit::Module m = cnnTwin();
  m.attr("conv1").toModule().attr("weight").toTensor().requires_grad_(false);
  ScriptedClassifierImpl scripted(save(m, "frozen_conv1.pt"));
  EXPECT_EQ(scripted.named_parameters().find("conv1.weight"), nullptr);
  ASSERT_NE(scripted.named_buffers().find("conv1.weight"), nullptr);
  EXPECT_EQ(scripted.named_parameters().size(), 7u);
  torch::nn::functional::cross_entropy(scripted.forward(torch::randn({4, 1, 28, 28})),
                                       torch::randint(0, 10, {4}))
      .backward();
  EXPECT_FALSE(scripted.named_buffers()["conv1.weight"].grad().defined());
  EXPECT_TRUE(scripted.named_parameters()["conv2.weight"].grad().defined());
}

TEST_F(ScriptedModel, LarsExcludesWhatItExcludesOnTheNativeTwin) {
  ScriptedClassifierImpl scripted(save(cnnTwin(), "twin.pt"));
  auto native = buildModel(twinOptions());
  OptimizerOptions o;
  o.name = "lars";
  auto excludedNames = [&](torch::nn::Module& m) {
    auto opt = makeOptimizer(namedParameters(m), o);
    std::vector<std::string> out;
    for (size_t i = 0; i < opt->params().size(); ++i) {
      if (opt->excluded(i)) out.push_back(opt->params()[i].name);
    }
    return out;
  };
  const auto excluded = excludedNames(scripted);
  EXPECT_EQ(excluded, excludedNames(*native));
  EXPECT_EQ(excluded, (std::vector<std::string>{"bn1.weight", "bn1.bias", "bn2.weight", "bn2.bias",
                                                "fc.bias"}));
  o.excludePattern = "^fc\\.";  // optim.exclude_pattern on the module's own names
  EXPECT_EQ(excludedNames(scripted), (std::vector<std::string>{"fc.weight", "fc.bias"}));
}

TEST_F(ScriptedModel, ItsFileIsAWeightsFileForInitFrom) {
  const std::string path = save(cnnTwin(), "twin.pt");
  auto native = buildModel(twinOptions());
  loadStateDict(*native, path);  // names and shapes checked both ways
  ScriptedClassifierImpl scripted(path);
  for (const auto& p : scripted.named_parameters()) {
    EXPECT_TRUE(torch::equal(p.value(), native->named_parameters()[p.key()])) << p.key();
  }
}

TEST_F(ScriptedModel, SavesForEvaluationWithoutChangingTheModel) {
  ScriptedClassifierImpl scripted(save(cnnTwin(), "twin.pt"));
  scripted.train();
  scripted.forward(torch::randn({4, 1, 28, 28}));  // moves the running statistics
  const std::string out = (dir_ / "model.jit.pt").string();
  scripted.saveForEvaluation(out);
  EXPECT_TRUE(scripted.is_training());
  EXPECT_TRUE(scripted.module().is_training());
  EXPECT_TRUE(scripted.module().attr("bn1").toModule().is_training());
  torch::jit::Module back = torch::jit::load(out);
  EXPECT_FALSE(back.is_training());
  std::map<std::string, torch::Tensor> saved;
  for (const auto& b : back.named_buffers()) saved[b.name] = b.value;
  for (const auto& b : scripted.named_buffers()) {
    EXPECT_TRUE(torch::equal(saved.at(b.key()), b.value())) << b.key();
  }
  scripted.eval();
  const torch::Tensor x = torch::randn({5, 1, 28, 28});
  torch::NoGradGuard noGrad;
  EXPECT_TRUE(torch::equal(back.forward({x}).toTensor(), scripted.forward(x)));
}

TEST_F(ScriptedModel, RefusesWhatIsNotATorchScriptModule) {
  const std::string text = (dir_ / "notes.txt").string();
  std::ofstream(text) << "not a model\n";
  EXPECT_NE(refusal(text).find("is not a TorchScript file (not a zip archive)"), std::string::npos)
      << refusal(text);
  EXPECT_NE(refusal((dir_ / "missing.pt").string()).find("does not exist"), std::string::npos);
  // torch.save's archive: data.pkl and tensors, no code.
  const std::string pickled = archive("state.pt", {"data.pkl", "data/0"});
  EXPECT_NE(refusal(pickled).find("is a torch.save file"), std::string::npos) << refusal(pickled);
}

TEST_F(ScriptedModel, RefusesAFileOfANewerPyTorch) {
  // What PyTorch >= 2.1 writes at the end of every archive.
  const std::string newer = archive(
      "newer.pt", {"data.pkl", "constants.pkl", "code/__torch__.py", ".data/serialization_id"});
  const std::string why = refusal(newer);
  if (TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 1)) {
    EXPECT_NE(why.find("saved by PyTorch 2.1 or newer"), std::string::npos) << why;
    EXPECT_NE(why.find(libtorchVersion()), std::string::npos) << why;
    EXPECT_NE(why.find("/usr/bin/python3"), std::string::npos) << why;
  } else {
    // A 2.1+ libtorch reads such archives: this fake one fails on its code.
    EXPECT_EQ(why.find("2.1 or newer"), std::string::npos) << why;
    EXPECT_NE(why.find("cannot load the TorchScript module"), std::string::npos) << why;
  }
}

TEST_F(ScriptedModel, RefusesAForwardThatIsNotOneTensorToLogits) {
  torch::jit::Module two("Two");
  two.register_attribute("training", c10::BoolType::get(), true);
  two.register_parameter("w", trainable(torch::randn({10, 784})), false);
  two.define(R"(
def forward(self, x, y):
    return torch.linear(x.flatten(1) + y.flatten(1), self.w)
)");
  EXPECT_NE(refusal(save(two, "two.pt")).find("exactly one Tensor argument"), std::string::npos);

  torch::jit::Module pair("Pair");
  pair.register_attribute("training", c10::BoolType::get(), true);
  pair.register_parameter("w", trainable(torch::randn({10, 784})), false);
  pair.define(R"(
def forward(self, x):
    y = torch.linear(x.flatten(1), self.w)
    return y, y
)");
  EXPECT_NE(refusal(save(pair, "pair.pt")).find("it must return the logits tensor"),
            std::string::npos)
      << refusal(save(pair, "pair.pt"));

  torch::jit::Module wide("Wide");
  wide.register_attribute("training", c10::BoolType::get(), true);
  wide.register_parameter("w", trainable(torch::randn({7, 784})), false);
  wide.define(R"(
def forward(self, x):
    return torch.linear(x.flatten(1), self.w)
)");
  const std::string shape = refusal(save(wide, "wide.pt"));
  EXPECT_NE(shape.find("forward returned shape [2, 7]"), std::string::npos) << shape;
  EXPECT_NE(shape.find("10 classes"), std::string::npos) << shape;

  torch::jit::Module rgb("Rgb");
  rgb.register_attribute("training", c10::BoolType::get(), true);
  rgb.register_parameter("w", trainable(torch::randn({10, 3 * 784})), false);
  rgb.define(R"(
def forward(self, x):
    return torch.linear(x.flatten(1), self.w)
)");
  const std::string failed = refusal(save(rgb, "rgb.pt"));
  EXPECT_NE(failed.find("forward failed on a batch of the data's shape [2, 1, 28, 28]"),
            std::string::npos)
      << failed;
  EXPECT_NE(failed.find("mat1 and mat2 shapes cannot be multiplied"), std::string::npos) << failed;
}

TEST_F(ScriptedModel, RefusesNothingToTrainAndNonFp32Weights) {
  torch::jit::Module frozen("Frozen");
  frozen.register_attribute("training", c10::BoolType::get(), true);
  frozen.register_parameter("w", torch::randn({10, 784}).requires_grad_(false), false);
  frozen.define(R"(
def forward(self, x):
    return torch.linear(x.flatten(1), self.w)
)");
  const std::string path = save(frozen, "frozen.pt");
  EXPECT_NE(refusal(path).find("no parameter of the module requires grad"), std::string::npos)
      << refusal(path);
  torch::jit::Module half("Half");
  half.register_attribute("training", c10::BoolType::get(), true);
  half.register_parameter("w", trainable(torch::randn({10, 784}).to(torch::kHalf)), false);
  half.define(R"(
def forward(self, x):
    return torch.linear(x.flatten(1).half(), self.w).float()
)");
  const std::string why = refusal(save(half, "half.pt"));
  EXPECT_NE(why.find("parameter 'w' is Half"), std::string::npos) << why;
}

TEST_F(ScriptedModel, IsBuiltByNameWithItsPath) {
  ModelOptions o;
  o.name = "torchscript";
  EXPECT_THROW(buildModel(o), InvalidArgument);  // no path
  o.path = save(cnnTwin(), "twin.pt");
  auto m = buildModel(o);
  EXPECT_NE(dynamic_cast<ScriptedClassifierImpl*>(m.get()), nullptr);
  EXPECT_EQ(m->forward(torch::randn({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
}

}  // namespace
}  // namespace bigbatch
