// Training from a folder of JPEGs with data.decode = "gpu" (CUDA build with
// nvJPEG, label "cuda"; skipped without a GPU): the run trains and evaluates
// through the GPU decode path, at fp32 and bf16, and its first epoch's loss
// is that of the same run decoding on the CPU — the same samples, order,
// crops and flips; only the decoders' pixel differences (and cuDNN's
// non-deterministic sums) separate them.
#include <gtest/gtest.h>

#include <filesystem>

#include "../data/jpeg_fixtures.h"
#include "bigbatch/train/config_schema.h"
#include "run_helpers.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
namespace fx = test_fixtures;

class GpuDecodeRun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    root_ = fs::path(::testing::TempDir()) / "gpu_decode_run";
    fs::remove_all(root_);
    // 3 classes, 32 training and 12 validation images each, 48..95 x 40..79.
    for (const auto& [split, n] : {std::pair{"train", 32}, std::pair{"val", 12}}) {
      for (int c = 0; c < 3; ++c) {
        for (int i = 0; i < n; ++i) {
          const uint64_t seed = static_cast<uint64_t>(c * 1000 + i + (split[0] == 'v' ? 500 : 0));
          fx::write(root_ / split / ("c" + std::to_string(c)) / ("i" + std::to_string(i) + ".jpg"),
                    fx::smoothJpeg(48 + (i * 13) % 48, 40 + (i * 7) % 40, seed));
        }
      }
    }
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  TrainResult run(const std::string& decode, const std::string& precision) {
    Config c = defaultTrainingConfig();
    c.set("run.device=cuda");
    c.set("data.dataset=folder");
    c.set("data.path=" + root_.string());
    c.set("data.decode=" + decode);
    c.set("model.image_size=32");
    c.set("train.batch_size=16");
    c.set("train.epochs=2");
    c.set("train.stop_at_target=false");
    c.set("amp.precision=" + precision);
    c.set("ckpt.every_epochs=0");
    validateTrainingConfig(c);
    auto comms = makeInProcessGroup(1);
    TrainOptions o;
    o.comm = comms[0].get();
    o.runDir = (root_ / ("run-" + decode + "-" + precision)).string();
    o.overwrite = true;
    o.verbosity = Verbosity::kQuiet;
    return train(c, o);
  }

  fs::path root_;
};

TEST_F(GpuDecodeRun, TrainsAndEvaluatesAsTheCpuDecodeDoes) {
  const TrainResult cpu = run("cpu", "fp32");
  const TrainResult gpu = run("gpu", "fp32");
  EXPECT_EQ(gpu.epochs, 2);
  EXPECT_EQ(gpu.steps, cpu.steps);
  EXPECT_TRUE(std::isfinite(gpu.lastLoss));
  // The same samples and crops: the first epoch's mean loss within 5 % of
  // the CPU decode's (measured difference printed).
  std::printf("[ measured ] first-epoch loss: cpu decode %.5f, gpu decode %.5f\n", cpu.firstLoss,
              gpu.firstLoss);
  EXPECT_NEAR(gpu.firstLoss, cpu.firstLoss, 0.05 * cpu.firstLoss);
  EXPECT_GT(gpu.finalAccuracy, 0.0);  // evaluated (on the GPU path's centre crops)
  const TrainResult bf16 = run("gpu", "bf16");
  EXPECT_EQ(bf16.epochs, 2);
  EXPECT_TRUE(std::isfinite(bf16.lastLoss));
}

}  // namespace
}  // namespace bigbatch
