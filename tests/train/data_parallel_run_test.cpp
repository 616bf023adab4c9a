// Data-parallel and large-batch runs on in-process ranks: LARS with batch
// and momentum schedules, LAMB, K-FAC on two ranks, partitioned optimizer
// state (ddp.partition = optimizer) and fusion autotuning.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "bigbatch/ckpt/checkpoint.h"
#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/common/error.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/train/partitioned_state.h"
#include "bigbatch/train/trainer.h"
#include "run_helpers.h"

namespace bigbatch {
namespace {

using namespace test_runs;

// A large-batch recipe end to end: LARS with excluded parameters at a lower
// rate, a momentum schedule and a batch-size schedule that doubles the batch
// (and, by the linear rule, the lr) from epoch 3; logged under the MLPerf
// LARS keys.
TEST(LargeBatchRun, LarsWithBatchAndMomentumSchedules) {
  const std::string dir = ::testing::TempDir() + "/lars_run_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  Config c = defaultTrainingConfig();
  c.set("data.train_samples=4096");
  c.set("data.eval_samples=1000");
  c.set("train.epochs=3");
  c.set("train.batch_size=512");
  c.set("train.virtual_workers=4");
  c.set("run.threads=2");
  c.set("optim.name=lars");
  c.set("optim.lr=20.0");
  c.set("optim.excluded_lr_scale=0.02");
  c.set("model.bn_momentum=0.3");  // few steps: running statistics must catch up
  c.set("schedule.warmup_epochs=1");
  c.set("schedule.decay=poly");
  c.set("schedule.momentum_epochs=[0.0, 2.0]");
  c.set("schedule.momentum_values=[0.8, 0.9]");
  c.set("schedule.batch_epochs=[3]");
  c.set("schedule.batch_factors=[2]");
  TrainOptions o;
  o.runDir = dir;
  o.verbosity = Verbosity::kQuiet;
  std::vector<StepRecord> steps;
  o.onStep = [&](const StepRecord& r) { steps.push_back(r); };
  TrainResult r = train(c, o);
  EXPECT_EQ(r.steps, 8 + 8 + 4);  // 4096 / 512, then 4096 / 1024
  ASSERT_EQ(steps.size(), 20u);
  EXPECT_EQ(steps[15].samples, 512);
  EXPECT_EQ(steps[16].samples, 1024);
  // Warmup reaches the peak at epoch 1; the doubled batch doubles the lr.
  EXPECT_NEAR(steps[8].lr, 20.0 * std::pow(1.0 - 0.0 / 2.0, 2.0), 1e-9);
  EXPECT_NEAR(steps[16].lr, 2 * 20.0 * std::pow(1.0 - 1.0 / 2.0, 2.0), 1e-9);
  EXPECT_LT(r.lastLoss, 0.8 * r.firstLoss);
  EXPECT_GT(r.finalAccuracy, 0.4);  // chance is 0.1

  auto rows = readCsv(dir + "/metrics.csv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["global_batch"], "512");
  EXPECT_EQ(rows[2]["global_batch"], "1024");
  // The momentum of each epoch's last step: at position 1 - 1/8 and 2 - 1/8.
  EXPECT_NEAR(std::stod(rows[0]["momentum"]), 0.8 + 0.1 * (0.875 / 2.0), 1e-5);
  EXPECT_NEAR(std::stod(rows[2]["momentum"]), 0.9, 1e-9);

  auto lines = readMllog(dir + "/mlperf.log");
  std::map<std::string, int> count;
  for (const auto& l : lines) {
    ++count[l["key"].get<std::string>()];
    if (l["key"] == "opt_name") {
      EXPECT_EQ(l["value"], "lars");
    }
    if (l["key"] == "lars_opt_base_learning_rate") {
      EXPECT_EQ(l["value"], 20.0);
    }
  }
  for (const char* once :
       {"opt_name", "lars_opt_base_learning_rate", "lars_opt_end_learning_rate",
        "lars_opt_learning_rate_decay_poly_power", "lars_opt_learning_rate_decay_steps",
        "lars_epsilon", "lars_opt_learning_rate_warmup_epochs", "lars_opt_momentum",
        "lars_opt_weight_decay", "model_bn_span"}) {
    EXPECT_EQ(count[once], 1) << once;
  }
  EXPECT_EQ(count["sgd_opt_base_learning_rate"], 0);
  // Decay steps under the batch-size schedule: 8 + 8 + 4 steps in the
  // budget, minus the 8 of the 1-epoch warmup (not 16 = 2 epochs x 8).
  for (const auto& l : lines) {
    if (l["key"] == "lars_opt_learning_rate_decay_steps") {
      EXPECT_EQ(l["value"], 12);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(LargeBatchRun, LambTrainsWithLinearScaledLr) {
  const std::string dir = ::testing::TempDir() + "/lamb_run_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  Config c = defaultTrainingConfig();
  c.set("data.train_samples=4096");
  c.set("data.eval_samples=1000");
  c.set("train.epochs=3");
  c.set("train.batch_size=512");
  c.set("run.threads=2");
  c.set("optim.name=lamb");
  c.set("optim.lr_per_256=0.05");  // peak lr 0.1 at batch 512
  c.set("model.bn_momentum=0.3");
  c.set("optim.weight_decay=0.01");
  c.set("schedule.warmup_epochs=0.5");
  TrainOptions o;
  o.runDir = dir;
  o.verbosity = Verbosity::kQuiet;
  double maxLr = 0;
  o.onStep = [&](const StepRecord& r) { maxLr = std::max(maxLr, r.lr); };
  TrainResult r = train(c, o);
  EXPECT_NEAR(maxLr, 0.1, 1e-2);
  EXPECT_LT(r.lastLoss, 0.8 * r.firstLoss);
  EXPECT_GT(r.finalAccuracy, 0.4);  // chance is 0.1
  std::ifstream in(dir + "/summary.json");
  nlohmann::json s = nlohmann::json::parse(in);
  EXPECT_EQ(s["optimizer"], "lamb");
  EXPECT_NEAR(s["peak_lr"].get<double>(), 0.1, 1e-12);
  std::filesystem::remove_all(dir);
}

TEST(LargeBatchRun, KfacOnTwoRanksTrainsAndKeepsTheirWeightsIdentical) {
  // Two in-process ranks (threads; the layer tap is per thread), each with
  // its own copy of the seeded model: K-FAC's factors come from both ranks'
  // samples, summed, so every rank preconditions the same averaged gradient
  // with the same factors and the weights stay bit-identical.
  const std::string dir = ::testing::TempDir() + "/kfac_run_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  Config c = defaultTrainingConfig();
  c.set("data.train_samples=4096");
  c.set("data.eval_samples=1000");
  c.set("train.epochs=2");
  c.set("train.batch_size=256");
  c.set("train.virtual_workers=2");
  c.set("run.threads=1");
  c.set("optim.name=lars");
  c.set("optim.lr=20.0");
  c.set("optim.excluded_lr_scale=0.02");
  c.set("optim.kfac=true");
  c.set("optim.kfac_samples=64");
  c.set("model.bn_momentum=0.3");
  c.set("schedule.warmup_epochs=0.5");
  c.set("schedule.decay=poly");
  std::vector<TrainingJob> jobs = seededJobs(2);
  const RankRuns runs = trainInProcess(c, dir, jobs);
  ASSERT_TRUE(runs.errors[0].empty() && runs.errors[1].empty())
      << runs.errors[0] << " / " << runs.errors[1];
  EXPECT_EQ(runs.results[0].steps, 2 * 4096 / 512);
  EXPECT_LT(runs.results[0].lastLoss, 0.8 * runs.results[0].firstLoss);
  EXPECT_GT(runs.results[0].finalAccuracy, 0.5);  // chance is 0.1
  const auto p0 = jobs[0].model->named_parameters(), p1 = jobs[1].model->named_parameters();
  for (const auto& item : p0) {
    EXPECT_TRUE(torch::equal(item.value(), p1[item.key()])) << item.key();
  }
  std::ifstream in(dir + "/summary.json");
  nlohmann::json summary = nlohmann::json::parse(in);
  EXPECT_EQ(summary["optimizer"], "lars");
  EXPECT_EQ(summary["kfac"], true);
  std::filesystem::remove_all(dir);
}

// The partition a model on a GPU takes — gradients reduce-scattered in host
// mirrors, the slices and their optimizer in host memory, each bucket copied
// back after the all-gather — through the whole trainer on the CPU (where
// the copies are plain): 2 ranks, 16 LARS steps with fp16 on the wire end
// bit for bit where the in-place partition ends, and a resume from the
// staged run's step-4 checkpoint (weights written into the model after the
// exchange was built, so the host slices must be refreshed from them) ends
// there too.
TEST(PartitionedRun, ThroughHostMirrorsItTrainsAndResumesBitForBitAsInPlace) {
  Config c = defaultTrainingConfig();
  c.set("data.dataset=synthetic");
  c.set("data.train_samples=1024");
  c.set("data.eval_samples=256");
  c.set("train.epochs=2");
  c.set("train.batch_size=64");
  c.set("run.threads=1");
  c.set("optim.name=lars");
  c.set("optim.lr=2.0");
  c.set("ddp.fusion_bytes=16384");  // several buckets, layers split across the ranks
  c.set("ddp.exchange_dtype=fp16");
  c.set("ddp.partition=optimizer");
  c.set("ckpt.every_steps=4");
  c.set("ckpt.keep=10");
  const std::string base = ::testing::TempDir() + "/staged_partition_" + std::to_string(::getpid());
  auto run = [&](const std::string& name, bool staged, const std::string& resume) {
    const std::string dir = base + "_" + name;
    if (resume.empty()) std::filesystem::remove_all(dir);
    std::vector<TrainingJob> jobs = seededJobs(2);
    auto comms = makeInProcessGroup(2);
    std::vector<std::string> errors(2);
    std::vector<int64_t> steps(2, 0);
    onRanks(2, [&](int r) {
      TrainOptions o;
      o.comm = comms[r].get();
      o.runDir = dir;
      o.overwrite = !resume.empty();
      o.resume = resume;
      o.stageThroughHost = staged;
      o.verbosity = Verbosity::kQuiet;
      try {
        steps[r] = train(c, o, jobs[r]).steps;
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
    EXPECT_EQ(errors[0], "") << name;
    EXPECT_EQ(errors[1], "") << name;
    EXPECT_EQ(steps[0], 16) << name;
    std::vector<torch::Tensor> w;
    for (const auto& p : jobs[0].model->parameters()) w.push_back(p.detach().clone());
    return w;
  };
  const std::vector<torch::Tensor> inPlace = run("in_place", false, "");
  const std::vector<torch::Tensor> staged = run("staged", true, "");
  const std::vector<torch::Tensor> resumed =
      run("resumed", true, base + "_staged/checkpoints/ckpt-000000004.pt");
  const std::vector<torch::Tensor> initial = seededJobs(1)[0].model->parameters();
  ASSERT_EQ(staged.size(), inPlace.size());
  ASSERT_EQ(resumed.size(), inPlace.size());
  for (size_t i = 0; i < inPlace.size(); ++i) {
    EXPECT_TRUE(torch::equal(staged[i], inPlace[i])) << "parameter " << i;
    EXPECT_TRUE(torch::equal(resumed[i], staged[i])) << "parameter " << i << " after the resume";
  }
  EXPECT_FALSE(torch::equal(staged[0], initial[0]));  // the steps moved the weights
  for (const char* name : {"_in_place", "_staged", "_resumed"})
    std::filesystem::remove_all(base + name);
}

TEST(PartitionedRun, EachRankHoldsHalfTheOptimizerStateAndTheRanksKeepOneModel) {
  // Two in-process ranks, LAMB (two buffers per value): partitioned, each
  // rank's state is its half of every bucket; unpartitioned, all of it.
  Config c = defaultTrainingConfig();
  c.set("data.dataset=synthetic");
  c.set("data.train_samples=1024");
  c.set("data.eval_samples=256");
  c.set("train.epochs=1");
  c.set("train.batch_size=128");
  c.set("run.threads=1");
  c.set("optim.name=lamb");
  c.set("optim.lr=0.004");
  c.set("ddp.fusion_bytes=16384");
  std::map<std::string, nlohmann::json> summaries;
  std::map<std::string, std::vector<torch::Tensor>> weights;
  for (const std::string partition : {"none", "optimizer"}) {
    const std::string dir =
        ::testing::TempDir() + "/partition_" + partition + "_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    c.set("ddp.partition=" + partition);
    std::vector<TrainingJob> jobs = seededJobs(2);
    const RankRuns runs = trainInProcess(c, dir, jobs);
    ASSERT_TRUE(runs.errors[0].empty() && runs.errors[1].empty())
        << runs.errors[0] << " / " << runs.errors[1];
    std::ifstream in(dir + "/summary.json");
    summaries[partition] = nlohmann::json::parse(in);
    // Both ranks end with the same whole model (the all-gather reached every slice).
    for (const auto& item : jobs[0].model->named_parameters()) {
      EXPECT_TRUE(torch::equal(item.value(), jobs[1].model->named_parameters()[item.key()]))
          << partition << " " << item.key();
      weights[partition].push_back(item.value().detach().clone());
    }
    std::filesystem::remove_all(dir);
  }
  const int64_t values = summaries["none"]["parameters"].get<int64_t>();
  // Two fp32 buffers per value, and the 8-byte step counter.
  EXPECT_EQ(summaries["none"]["optimizer_state_bytes"].get<int64_t>(), 8 * values + 8);
  EXPECT_EQ(summaries["none"]["partition"], "none");
  EXPECT_EQ(summaries["optimizer"]["partition"], "optimizer");
  // Half of every bucket, rounded per bucket (at most one value each way).
  const int64_t half = summaries["optimizer"]["optimizer_state_bytes"].get<int64_t>() - 8;
  const auto buckets = static_cast<int64_t>(weights["none"].size());  // at most one per tensor
  EXPECT_LE(std::abs(half - 4 * values), 8 * buckets) << half << " vs " << 4 * values;
  EXPECT_LT(half, 4 * values + 8 * buckets);
  // Same training: LAMB's norms summed from the slices give the same step.
  for (size_t i = 0; i < weights["none"].size(); ++i) {
    EXPECT_TRUE(torch::allclose(weights["none"][i], weights["optimizer"][i], 1e-4, 1e-5)) << i;
  }
}

TEST(FusionAutotune, TheChoiceIsReportedAndCheckpointed) {
  // 2 in-process ranks, 40 steps: the default model's candidates are 16,
  // 64 and 256 KiB (143 KB of gradients), 6 steps each, chosen at step 18.
  const std::string dir = ::testing::TempDir() + "/fusion_auto_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  Config c = defaultTrainingConfig();
  c.set("data.dataset=synthetic");
  c.set("data.train_samples=5120");
  c.set("data.eval_samples=256");
  c.set("train.epochs=1");
  c.set("train.batch_size=64");
  c.set("run.threads=1");
  c.set("ddp.fusion_bytes=auto");
  std::vector<TrainingJob> jobs = seededJobs(2);
  const RankRuns runs = trainInProcess(c, dir, jobs);
  ASSERT_TRUE(runs.errors[0].empty() && runs.errors[1].empty())
      << runs.errors[0] << " / " << runs.errors[1];
  std::ifstream in(dir + "/summary.json");
  const nlohmann::json summary = nlohmann::json::parse(in);
  const auto chosen = summary["fusion_bytes"].get<int64_t>();
  EXPECT_TRUE(chosen == 16384 || chosen == 65536 || chosen == 262144) << chosen;
  const Checkpoint k = readCheckpoint(dir + "/checkpoints/ckpt-000000040.pt");
  ASSERT_TRUE(k.counters.count("fusion_tuning.bytes"));
  EXPECT_EQ(static_cast<int64_t>(k.counters.at("fusion_tuning.bytes")), chosen);
  std::filesystem::remove_all(dir);
}

TEST(PartitionedRun, WholeStateRoundTripsThroughTheSlicesAndUnknownEntriesAreRefused) {
  const int n = 2;
  auto comms = makeInProcessGroup(n);
  std::vector<std::string> errors(n);
  onRanks(n, [&](int r) {
    try {
      auto model = seededModel();
      DdpOptions d;
      d.partition = true;
      d.fusionBytes = 16384;
      JobCollectives job(*comms[r]);
      DistributedDataParallel ddp(*model, job, d);
      OptimizerOptions o;
      o.name = "sgd";
      auto optimizer = makeRunOptimizer(*model, ddp, o);
      NamedTensors state = wholeOptimizerState(*optimizer, ddp);  // collective
      ASSERT_EQ(state.size(), ddp.parameterNames().size() + 1);
      for (auto& [name, t] : state) {  // whole shapes, values that tell the elements apart
        if (name != "step") t = torch::arange(t.numel(), torch::kFloat).reshape(t.sizes());
      }
      loadWholeOptimizerState(*optimizer, ddp, state);
      const NamedTensors again = wholeOptimizerState(*optimizer, ddp);
      ASSERT_EQ(again.size(), state.size());
      for (size_t i = 0; i < state.size(); ++i) {
        EXPECT_EQ(again[i].first, state[i].first);
        EXPECT_TRUE(torch::equal(again[i].second, state[i].second)) << again[i].first;
      }
      NamedTensors extra = state;
      extra.emplace_back("conv1.weight.exp_avg", state[0].second);
      try {
        loadWholeOptimizerState(*optimizer, ddp, extra);
        ADD_FAILURE() << "an unknown entry was accepted";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("conv1.weight.exp_avg"), std::string::npos);
      }
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  });
  EXPECT_TRUE(errors[0].empty() && errors[1].empty()) << errors[0] << " / " << errors[1];
}

TEST(PartitionedRun, KfacAndTheUnfusedOptimizerAreRefusedNamingTheFix) {
  for (const char* other : {"optim.kfac=true", "optim.fused=false"}) {
    Config c = defaultTrainingConfig();
    c.set("ddp.partition=optimizer");
    c.set(other);
    try {
      validateTrainingConfig(c);
      FAIL() << other << " accepted with ddp.partition = optimizer";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("ddp.partition"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace bigbatch
