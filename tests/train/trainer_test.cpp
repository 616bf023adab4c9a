// A short real training run on Fashion-MNIST: the loss falls, and the run
// directory holds every file with the documented keys; what is refused
// before any work; the ranks agree before they train.
// (trainer_wiring_test.cpp: the recipe's settings reaching the step.)
#include "bigbatch/train/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "bigbatch/ckpt/checkpoint.h"
#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/common/error.h"
#include "bigbatch/data/batch.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/train/config_schema.h"
#include "run_helpers.h"

namespace bigbatch {
namespace {

using namespace test_runs;

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
    // CTest runs each suite as one test, every case in one process
    // (cmake/gtest_suites.cmake), so this run is trained once for all of
    // them. One directory per process all the same:
    // a gtest filter may run the cases apart, possibly in parallel.
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
                        "global_batch_size", "world_size", "optimizer", "kfac"}) {
    EXPECT_TRUE(s.contains(k)) << k;
  }
  EXPECT_EQ(s["reached_target"], false);
  EXPECT_EQ(s["kfac"], false);
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

// Every step's gradients are that step's alone. With 32 distinct images and
// a batch of 32, each step (one epoch) sees the same images in another
// order, and a learning rate of 1e-30 leaves the weights as they were: the
// gradients after steps 2 and 3 must equal step 1's up to the order of the
// batch's sums (measured: at most 1.3e-4 of the largest, the first conv's
// sums over 32 x 28 x 28 positions) — left unzeroed between steps, step k
// would hold k times them, 1.0 or more off.
TEST(TrainStepGradients, AreThoseOfTheStepAlone) {
  const std::string dir = ::testing::TempDir() + "/grad_alone_" + std::to_string(::getpid());
  Config c = defaultTrainingConfig();
  c.set("data.flip=false");
  c.set("train.batch_size=32");
  c.set("train.epochs=3");
  c.set("train.stop_at_target=false");
  c.set("run.threads=2");
  c.set("optim.lr=1e-30");
  c.set("optim.momentum=0");
  c.set("optim.weight_decay=0");
  c.set("schedule.warmup_epochs=0");
  c.set("schedule.decay=constant");
  TrainingJob job;
  job.trainData = takeFirst(loadFashionMnist("", "train"), 32);
  job.testData = takeFirst(loadFashionMnist("", "test"), 100);
  job.model = seededModel();
  std::vector<std::vector<torch::Tensor>> grads;  // per step, per parameter
  TrainOptions o;
  o.runDir = dir;
  o.overwrite = true;
  o.verbosity = Verbosity::kQuiet;
  o.onStep = [&](const StepRecord&) {
    std::vector<torch::Tensor> g;
    for (const auto& p : job.model->parameters()) g.push_back(p.grad().detach().clone());
    grads.push_back(std::move(g));
  };
  train(c, o, job);
  ASSERT_EQ(grads.size(), 3u);
  for (size_t step = 1; step < grads.size(); ++step) {
    for (size_t i = 0; i < grads[0].size(); ++i) {
      const double scale = grads[0][i].abs().max().item<double>();
      ASSERT_GT(scale, 0) << "parameter " << i << " has no gradient";
      const double off = (grads[step][i] - grads[0][i]).abs().max().item<double>() / scale;
      EXPECT_LT(off, 1e-2) << "step " << step + 1 << ", parameter " << i;
    }
  }
  std::filesystem::remove_all(dir);
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

namespace bigbatch {
namespace {

// bf16 compute on copies of fp32 masters: the same steps as fp32 up to
// 16-bit rounding (close, not equal — so autocast really ran), documented
// in summary.json; no loss scaling by default (bf16 has fp32's range).
TEST(MixedPrecisionRun, Bf16TracksFp32AndIsRecorded) {
  auto run = [](const std::string& precision, std::vector<double>* losses) {
    const std::string dir =
        ::testing::TempDir() + "/amp_" + precision + "_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    Config c = defaultTrainingConfig();
    c.set("data.train_samples=1024");  // 16 steps per epoch: bf16 is ~16x slower than fp32 here
    c.set("data.eval_samples=1000");
    c.set("train.epochs=2");
    c.set("run.threads=2");
    c.set("amp.precision=" + precision);
    TrainOptions o;
    o.runDir = dir;
    o.verbosity = Verbosity::kQuiet;
    o.onStep = [&](const StepRecord& r) { losses->push_back(r.loss); };
    TrainResult r = train(c, o);
    std::ifstream in(dir + "/summary.json");
    nlohmann::json s = nlohmann::json::parse(in);
    EXPECT_EQ(s["precision"], precision);
    EXPECT_EQ(s["loss_scaling"], false);
    auto rows = readCsv(dir + "/metrics.csv");
    EXPECT_EQ(rows.back()["loss_scale"], "1");
    EXPECT_EQ(rows.back()["skipped_steps"], "0");
    std::filesystem::remove_all(dir);
    return r;
  };
  std::vector<double> fp32, bf16;
  const TrainResult a = run("fp32", &fp32);
  const TrainResult b = run("bf16", &bf16);
  ASSERT_EQ(fp32.size(), bf16.size());
  EXPECT_NE(fp32[1], bf16[1]) << "bf16 gave fp32's exact loss: autocast did not engage";
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(bf16[i], fp32[i], 0.02 * fp32[i]) << "step " << i + 1;
  EXPECT_LT(b.lastLoss, 0.9 * b.firstLoss);
  EXPECT_NEAR(b.finalAccuracy, a.finalAccuracy, 0.05);
}

TEST(MixedPrecisionRun, Fp16ComputeOnCpuIsRefusedBeforeAnyWork) {
  Config c = defaultTrainingConfig();
  c.set("amp.precision=fp16");
  try {
    validateTrainingConfig(c);
    FAIL() << "fp16 compute on CPU accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("amp.precision = bf16"), std::string::npos) << e.what();
  }
}

// The CPU build refuses run.device = "cuda" in the config check, before any
// worker is launched or run directory made (the run's set-up checks again,
// for configs that skip it); the message names the CUDA build and the CPU
// fallback.
// The CUDA build on a machine without a GPU refuses the same way, naming the
// missing GPU instead.
TEST(DeviceChoice, CudaOnTheCpuBuildIsRefusedBeforeAnyWork) {
#ifdef BIGBATCH_WITH_CUDA
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is visible: run.device = cuda is valid";
  const char* fix = "sees no GPU";
#else
  const char* fix = "scripts/build-cuda";
#endif
  Config c = defaultTrainingConfig();
  c.set("run.device=cuda");
  const auto named = [fix](const std::string& message) {
    return message.find(fix) != std::string::npos &&
           message.find("run.device = \"cpu\"") != std::string::npos;
  };
  try {
    validateTrainingConfig(c);
    FAIL() << "run.device = cuda accepted by the CPU build";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(named(e.what())) << e.what();
  }
  // Through train(): refused, and nothing written.
  const std::string dir = ::testing::TempDir() + "/device_refused";
  std::filesystem::remove_all(dir);
  auto comms = makeInProcessGroup(1);
  TrainOptions o;
  o.comm = comms[0].get();
  o.runDir = dir;
  o.verbosity = Verbosity::kQuiet;
  c.set("data.dataset=synthetic");
  auto jobs = seededJobs(1);
  try {
    train(c, o, jobs[0]);
    FAIL() << "a run on run.device = cuda started on the CPU build";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(named(e.what())) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << "a refused run left a run directory";
}

// Two in-process ranks start a short synthetic run in `dir`, each set up by
// `adjust`; returns what each rank caught: a MismatchError's message, "wrong
// error type: ..." for any other error, or "" when its run finished.
std::vector<std::string> startTwoRanks(
    const std::string& dir, const std::function<void(int, Config&, TrainOptions&)>& adjust) {
  auto comms = makeInProcessGroup(2);
  std::filesystem::remove_all(dir);
  std::vector<std::string> errors(2);
  onRanks(2, [&](int r) {
    Config c = defaultTrainingConfig();
    c.set("data.dataset=synthetic");
    c.set("run.threads=1");
    c.set("comm.timeout_s=20");
    TrainOptions o;
    o.comm = comms[r].get();
    o.runDir = dir;
    o.verbosity = Verbosity::kQuiet;
    adjust(r, c, o);
    try {
      train(c, o);
    } catch (const MismatchError& e) {
      errors[r] = e.what();
    } catch (const std::exception& e) {
      errors[r] = std::string("wrong error type: ") + e.what();
    }
  });
  return errors;
}

// Ranks started with different recipes (here one --set more on rank 1) must
// all stop before training with the same error naming the problem and the
// fix — not train apart, and not hang.
TEST(RankAgreement, RanksWithDifferentConfigsStopWithTheSameNamedError) {
  const std::string dir = ::testing::TempDir() + "/disagree_" + std::to_string(::getpid());
  const auto errors = startTwoRanks(dir, [](int r, Config& c, TrainOptions&) {
    if (r == 1) c.set("optim.lr=0.2");
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("the ranks were started with different configs"), std::string::npos)
        << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("start every rank with the same recipe"), std::string::npos)
        << errors[r];
    EXPECT_EQ(errors[r].find("check failed"), std::string::npos) << errors[r];
  }
  // Nothing trained: no epoch reached the run directory.
  EXPECT_FALSE(std::filesystem::exists(dir + "/metrics.csv"));
  std::filesystem::remove_all(dir);
}

// A callback on some ranks only would add a collective on those ranks
// alone: both ranks must stop at once with the same named error, not fall
// out of step into a timeout.
TEST(RankAgreement, OnStepOnSomeRanksOnlyIsANamedError) {
  const std::string dir = ::testing::TempDir() + "/onstep_" + std::to_string(::getpid());
  const auto errors = startTwoRanks(dir, [](int r, Config&, TrainOptions& o) {
    if (r == 0) o.onStep = [](const StepRecord&) {};
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("onStep is set on some ranks only"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/metrics.csv"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace bigbatch
