// A short real training run on Fashion-MNIST: the loss falls, and the run
// directory holds every file with the documented keys.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/train/trainer.h"

namespace bigbatch {
namespace {

std::vector<nlohmann::json> readMllog(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_EQ(line.rfind(":::MLLOG {", 0), 0u) << line;
    lines.push_back(nlohmann::json::parse(line.substr(9)));
  }
  return lines;
}

class ShortRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Config c = defaultTrainingConfig();
    // 3 epochs of 4,000 images; 2,000 test images. ~10 s on 2 cores.
    c.set("data.train_samples=4000");
    c.set("data.eval_samples=2000");
    c.set("train.epochs=3");
    c.set("train.target_accuracy=0.99");  // not reached: the run must go on and say so
    c.set("run.threads=2");
    // One directory per process: CTest runs each case of this suite as its
    // own process, possibly in parallel.
    dir_ = ::testing::TempDir() + "/short_run_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    TrainOptions o;
    o.runDir = dir_;
    o.verbosity = Verbosity::kQuiet;
    result_ = train(c, o);
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  static inline std::string dir_;
  static inline TrainResult result_;
};

TEST_F(ShortRun, LossFallsAndAccuracyIsFarAboveChance) {
  EXPECT_EQ(result_.epochs, 3);
  EXPECT_EQ(result_.steps, 3 * 32);  // ceil(4000 / 128) = 32 steps per epoch
  EXPECT_LT(result_.lastLoss, 0.8 * result_.firstLoss);
  EXPECT_GT(result_.finalAccuracy, 0.6);  // chance is 0.1
  EXPECT_FALSE(result_.reachedTarget);
}

TEST_F(ShortRun, SummaryHasDocumentedKeys) {
  std::ifstream in(dir_ + "/summary.json");
  nlohmann::json s = nlohmann::json::parse(in);
  for (const char* k : {"reached_target", "target_accuracy", "final_accuracy", "best_accuracy",
                        "time_to_target_s", "train_time_s", "throughput_img_s", "epochs", "steps",
                        "global_batch_size", "world_size"}) {
    EXPECT_TRUE(s.contains(k)) << k;
  }
  EXPECT_EQ(s["reached_target"], false);
  EXPECT_TRUE(s["time_to_target_s"].is_null());
  EXPECT_EQ(s["epochs"], 3);
  EXPECT_EQ(s["global_batch_size"], 128);
  EXPECT_EQ(s["world_size"], 1);
  EXPECT_DOUBLE_EQ(s["final_accuracy"].get<double>(), result_.finalAccuracy);
  EXPECT_GT(s["throughput_img_s"].get<double>(), 0);
}

TEST_F(ShortRun, MetricsCsvHasOneRowPerEpoch) {
  std::ifstream in(dir_ + "/metrics.csv");
  std::string header, line;
  std::getline(in, header);
  EXPECT_EQ(header.rfind("epoch,step,lr,train_loss,train_acc,test_acc,", 0), 0u) << header;
  int rows = 0;
  while (std::getline(in, line)) ++rows;
  EXPECT_EQ(rows, 3);
}

TEST_F(ShortRun, ResolvedConfigReloads) {
  Config c = defaultTrainingConfig();
  c.mergeFile(dir_ + "/config.toml");
  EXPECT_EQ(c.getInt("data.train_samples"), 4000);
}

TEST_F(ShortRun, MlperfLogHasRequiredKeysInOrder) {
  auto lines = readMllog(dir_ + "/mlperf.log");
  std::map<std::string, int> count;
  std::map<std::string, size_t> first;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string key = lines[i]["key"];
    if (!count[key]++) first[key] = i;
    EXPECT_TRUE(lines[i]["metadata"].contains("file"));
    EXPECT_TRUE(lines[i]["metadata"].contains("lineno"));
  }
  for (const char* once : {"cache_clear", "init_start", "init_stop", "run_start", "run_stop",
                           "submission_benchmark", "submission_division", "submission_org",
                           "submission_platform", "submission_status", "global_batch_size",
                           "gradient_accumulation_steps", "train_samples", "eval_samples",
                           "opt_name", "sgd_opt_base_learning_rate", "sgd_opt_momentum",
                           "sgd_opt_weight_decay", "model_bn_span"}) {
    EXPECT_EQ(count[once], 1) << once;
  }
  for (const char* perEpoch :
       {"epoch_start", "epoch_stop", "eval_start", "eval_stop", "eval_accuracy"}) {
    EXPECT_EQ(count[perEpoch], 3) << perEpoch;
  }
  EXPECT_LT(first["init_start"], first["init_stop"]);
  EXPECT_LT(first["init_stop"], first["run_start"]);
  EXPECT_LT(first["run_start"], first["epoch_start"]);
  EXPECT_EQ(lines.back()["key"], "run_stop");
  EXPECT_EQ(lines.back()["metadata"]["status"], "aborted");  // target not reached
  EXPECT_EQ(lines[first["eval_accuracy"]]["metadata"]["epoch_num"], 1);
  EXPECT_EQ(lines[first["run_start"]]["event_type"], "INTERVAL_START");
  EXPECT_EQ(lines[first["train_samples"]]["value"], 4000);
}

TEST(RunDirectory, RefusesToOverwriteAPreviousRun) {
  const std::string dir = ::testing::TempDir() + "/taken_run";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/summary.json") << "{}";
  Config c = defaultTrainingConfig();
  TrainOptions o;
  o.runDir = dir;
  o.verbosity = Verbosity::kQuiet;
  try {
    train(c, o);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--overwrite"), std::string::npos) << e.what();
  }
  std::ifstream in(dir + "/summary.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "{}");  // nothing lost
}

}  // namespace
}  // namespace bigbatch
