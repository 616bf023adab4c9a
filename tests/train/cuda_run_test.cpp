// Training on a CUDA device (CUDA build, label "cuda"): a short run with
// run.device = "cuda" trains (loss falls), says its device in summary.json,
// writes a model.pt and checkpoints that load on the CPU, and a resume of
// it with run.device = "cpu" continues on the CPU (and back: a CPU
// checkpoint resumes on the GPU). fp16 compute, refused on CPU, runs here.
// Two in-process ranks sharing the one GPU exchange through pinned host
// memory (ddp/device_staging.h) and end with bit-identical weights, also
// with the optimizer partitioned on the host (ddp.partition = optimizer).
// With run.deterministic the same run twice gives the same weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/models/average_pool.h"
#include "bigbatch/train/config_schema.h"
#include "step/classification_loss.h"
#include "run/run_device.h"
#include "run_helpers.h"

namespace bigbatch {
namespace {

using namespace test_runs;

bool haveGpu() { return torch::cuda::is_available(); }

Config shortRun(const std::string& device) {
  Config c = defaultTrainingConfig();
  c.set("data.dataset=synthetic");
  c.set("data.train_samples=2048");
  c.set("data.eval_samples=512");
  c.set("train.epochs=2");
  c.set("train.batch_size=128");
  c.set("run.device=" + device);
  return c;
}

TrainResult runOne(const Config& c, const std::string& dir, const std::string& resume = "") {
  auto comms = makeInProcessGroup(1);
  TrainOptions o;
  o.comm = comms[0].get();
  o.runDir = dir;
  o.resume = resume;
  o.overwrite = true;
  o.verbosity = Verbosity::kQuiet;
  auto jobs = seededJobs(1);
  return train(c, o, jobs[0]);
}

nlohmann::json summaryOf(const std::string& dir) {
  std::ifstream in(dir + "/summary.json");
  return nlohmann::json::parse(in);
}

TEST(CudaRun, TrainsAndWritesFilesTheCpuReads) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = ::testing::TempDir() + "/cuda_run";
  std::filesystem::remove_all(dir);
  const TrainResult r = runOne(shortRun("cuda"), dir);
  EXPECT_LT(r.lastLoss, r.firstLoss);
  EXPECT_EQ(summaryOf(dir)["device"].get<std::string>().rfind("cuda:0", 0), 0u);
  // model.pt: CPU tensors, loadable into a CPU model.
  auto model = seededModel();
  loadStateDict(*model, dir + "/model.pt");
  for (const auto& p : model->parameters()) EXPECT_TRUE(p.device().is_cpu());
  // The GPU run's checkpoint resumes on the CPU, with one more epoch.
  Config more = shortRun("cpu");
  more.set("train.epochs=3");
  const TrainResult cpu = runOne(more, dir, "auto");
  EXPECT_EQ(cpu.epochs, 3);
  EXPECT_EQ(summaryOf(dir)["device"], "cpu");
  // And that CPU checkpoint resumes on the GPU.
  Config gpuAgain = shortRun("cuda");
  gpuAgain.set("train.epochs=4");
  EXPECT_EQ(runOne(gpuAgain, dir, "auto").epochs, 4);
}

TEST(CudaRun, Fp16ComputeWithLossScalingRuns) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  Config c = shortRun("cuda");
  c.set("amp.precision=fp16");
  validateTrainingConfig(c);  // accepted on CUDA
  const std::string dir = ::testing::TempDir() + "/cuda_fp16";
  std::filesystem::remove_all(dir);
  const TrainResult r = runOne(c, dir);
  EXPECT_LT(r.lastLoss, r.firstLoss);
  const auto s = summaryOf(dir);
  EXPECT_EQ(s["precision"], "fp16");
  EXPECT_TRUE(s["loss_scaling"].get<bool>());
}

TEST(CudaRun, TwoRanksSharingTheGpuExchangeThroughHostMemoryAndStayIdentical) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  Config c = shortRun("cuda");
  c.set("train.batch_size=64");
  const std::string dir = ::testing::TempDir() + "/cuda_two";
  std::filesystem::remove_all(dir);
  auto jobs = seededJobs(2);
  const RankRuns runs = trainInProcess(c, dir, jobs);
  ASSERT_EQ(runs.errors[0], "");
  ASSERT_EQ(runs.errors[1], "");
  EXPECT_LT(runs.results[0].lastLoss, runs.results[0].firstLoss);
  // Every step applied the same summed gradient on both ranks: a bucket
  // the staging failed to bring back would make them drift apart.
  const auto a = jobs[0].model->parameters(), b = jobs[1].model->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].device().is_cuda());
    EXPECT_TRUE(torch::equal(a[i].to(torch::kCPU), b[i].to(torch::kCPU))) << "parameter " << i;
  }
}

// run.deterministic: two runs of the same config end with the same bytes.
// Without it cuDNN benchmarks its algorithms per run, and some GPU kernels
// sum in no fixed order: on an H200 (2026-12-04) the 16-step form of the
// partition test below measured 1.97e-3 of max |w| once and 1.20e-3 the
// next time.
TEST(CudaRun, DeterministicRunsEndWithTheSameWeights) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  Config c = shortRun("cuda");
  c.set("run.deterministic=true");
  std::vector<torch::Tensor> weights[2];
  for (int run = 0; run < 2; ++run) {
    const std::string dir = ::testing::TempDir() + "/cuda_deterministic_" + std::to_string(run);
    std::filesystem::remove_all(dir);
    runOne(c, dir);
    auto model = seededModel();
    loadStateDict(*model, dir + "/model.pt");
    for (const auto& p : model->parameters()) weights[run].push_back(p.detach().clone());
  }
  ASSERT_EQ(weights[0].size(), weights[1].size());
  for (size_t i = 0; i < weights[0].size(); ++i) {
    EXPECT_TRUE(torch::equal(weights[0][i], weights[1][i])) << "parameter " << i;
  }
}

// run.deterministic makes ATen's nondeterministic kernels errors that name
// themselves (not warnings: the promise is the same weights), and the
// models' pooling and the loss take their deterministic forms there: the
// run above trains, while ATen's own adaptive pooling backward raises.
TEST(CudaRun, DeterministicModeRaisesOnANondeterministicOpNamingIt) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  train_detail::RunDevice d = train_detail::resolveRunDevice("cuda", 0, 1, {true, true});
  train_detail::makeCurrent(d);
  const auto x = torch::randn({2, 4, 7, 7}, torch::kCUDA).requires_grad_(true);
  try {
    torch::adaptive_avg_pool2d(x, {3, 3}).sum().backward();
    ADD_FAILURE() << "adaptive_avg_pool2d's backward ran under deterministic algorithms";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("adaptive_avg_pool2d_backward"), std::string::npos)
        << e.what();
  }
  adaptiveAvgPool2d(x, 3, 3).sum().backward();  // the models' form: no error
  const auto logits = torch::randn({8, 10}, torch::kCUDA).requires_grad_(true);
  const auto labels = torch::randint(0, 10, {8}, torch::dtype(torch::kLong).device(torch::kCUDA));
  train_detail::crossEntropySum(logits, labels, 0.1).backward();
  train_detail::makeCurrent(train_detail::resolveRunDevice("cuda", 0, 1, {true, false}));
}

// ddp.partition = optimizer with the model on the GPU: the gradients are
// reduce-scattered through the host mirrors and each rank's slices — and
// their optimizer — live in host memory (ZeRO-Offload's split). Both ranks
// end bit-identical, and close to the unpartitioned run on the same GPU:
// the host's fused step and the device's kernels round alike but for the
// order of the norms' partial sums (SGD has none), while a slice updated
// twice or not at all moves weights by ~1e-2 of max |w|. Deterministic
// compute and 4 steps: what is compared is the optimizer, not the GPU's
// run-to-run noise (the test above) or its growth over many steps.
TEST(CudaRun, TwoRanksSharingTheGpuPartitionTheOptimizerOnTheHost) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  std::vector<torch::Tensor> weights[2];
  for (const std::string partition : {"none", "optimizer"}) {
    Config c = shortRun("cuda");
    c.set("run.deterministic=true");
    c.set("train.batch_size=64");
    c.set("data.train_samples=256");
    c.set("train.epochs=1");
    c.set("ddp.fusion_bytes=16384");  // several buckets, layers split across the ranks
    c.set("comm.allreduce=ring");     // the partition's reduce-scatter, in the same order
    c.set("ddp.partition=" + partition);
    const std::string dir = ::testing::TempDir() + "/cuda_partition_" + partition;
    std::filesystem::remove_all(dir);
    auto jobs = seededJobs(2);
    const RankRuns runs = trainInProcess(c, dir, jobs);
    ASSERT_EQ(runs.errors[0], "") << partition;
    ASSERT_EQ(runs.errors[1], "") << partition;
    EXPECT_EQ(summaryOf(dir)["partition"], partition);
    const auto a = jobs[0].model->parameters(), b = jobs[1].model->parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(a[i].device().is_cuda());
      EXPECT_TRUE(torch::equal(a[i].to(torch::kCPU), b[i].to(torch::kCPU)))
          << partition << " parameter " << i;
      weights[partition == "optimizer"].push_back(a[i].detach().to(torch::kCPU));
    }
  }
  double diff = 0, scale = 0;
  for (size_t i = 0; i < weights[0].size(); ++i) {
    diff = std::max(diff, (weights[1][i] - weights[0][i]).abs().max().item<double>());
    scale = std::max(scale, weights[0][i].abs().max().item<double>());
  }
  EXPECT_LT(diff, 1e-4 * scale) << "partitioned vs not: max |dw| " << diff << ", max |w| " << scale;
}

}  // namespace
}  // namespace bigbatch
