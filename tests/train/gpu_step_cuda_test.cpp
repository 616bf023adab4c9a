// The training step on a GPU (CUDA build, label "cuda"; issue 55): it never
// waits for the device — a step returns while a 0.2 s spin queued before it
// still holds the compute stream (the synchronous step drained the stream
// at its optimizer read-back and its tally read) — its refused steps are
// still counted and skipped (read one step late), and a captured step
// (run.cuda_graph) trains to the same weights as the uncaptured one in
// deterministic mode, with fp32 and with fp16's loss scale on the device —
// the small CNN, and ResNet-50 with cuDNN's fused BatchNorm+ReLU.
#include <ATen/cuda/Sleep.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/data/sampler.h"
#include "bigbatch/models/fused_batch_norm.h"
#include "bigbatch/train/config_schema.h"
#include "run_helpers.h"
#include "run/run_recorder.h"
#include "run_setup.h"
#include "step/step_graph.h"

namespace bigbatch {
namespace {

using namespace test_runs;

bool haveGpu() { return torch::cuda::is_available(); }

Config gpuRun() {
  Config c = defaultTrainingConfig();
  c.set("data.dataset=synthetic");
  c.set("data.train_samples=2048");
  c.set("data.eval_samples=512");
  c.set("train.epochs=2");
  c.set("train.batch_size=128");
  c.set("run.device=cuda");
  return c;
}

// One in-process rank's quiet run into `dir`, over an earlier one.
TrainOptions quietRun(Communicator* comm, const std::string& dir) {
  TrainOptions o;
  o.comm = comm;
  o.runDir = dir;
  o.overwrite = true;
  o.verbosity = Verbosity::kQuiet;
  return o;
}

bool computeStreamStillBusy() {
  const c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  return !impl.queryStream(impl.getStream(torch::Device(torch::kCUDA, 0)));
}

TEST(GpuStep, AStepReturnsWhileTheComputeStreamIsStillBusy) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  for (const char* precision : {"fp32", "fp16"}) {  // fp16: the loss scale on the device
    Config c = gpuRun();
    c.set(std::string("amp.precision=") + precision);
    const std::string dir = ::testing::TempDir() + "/gpu_step_busy_" + precision;
    std::filesystem::remove_all(dir);
    auto comms = makeInProcessGroup(1);
    const TrainOptions o = quietRun(comms[0].get(), dir);
    train_detail::RunRecorder recorder;
    auto jobs = seededJobs(1);
    const auto run = train_detail::setUpRun(c, o, jobs[0], recorder);
    ASSERT_TRUE(run->step->deferred()) << precision;
    const train_detail::RunInput& in = run->input;
    PipelineOptions po = in.pipeline;
    po.uint8Batches = in.uint8Transfer;
    const int64_t batch = 128;
    std::vector<std::vector<int64_t>> batches(4);
    for (int64_t b = 0; b < 4; ++b) {
      for (int64_t i = 0; i < batch; ++i) batches[b].push_back(b * batch + i);
    }
    InputPipeline pipeline(in.source, in.augment, po, 1, 1, batches);
    train_detail::DeviceFeed feed(pipeline, run->start.device.device, in.inputType);
    train_detail::StepTimes times;
    train_detail::StepTally tally;
    const StepHyper h{0.05, 0.9, 1.0, 1.0};
    // The first two steps: allocations, cuDNN's algorithms, the optimizer's tables.
    run->step->run(feed, {1, 1, 1, batch}, h, times, tally);
    run->step->run(feed, {1, 2, 2, batch}, h, times, tally);
    torch::cuda::synchronize();
    at::cuda::sleep(400'000'000);  // ~0.2 s on the compute stream
    ASSERT_TRUE(computeStreamStillBusy());
    const train_detail::StepOutcome third = run->step->run(feed, {1, 3, 3, batch}, h, times, tally);
    EXPECT_TRUE(computeStreamStillBusy())
        << precision << ": the step waited for the device before it returned";
    EXPECT_TRUE(third.settled && third.applied);  // the second step's outcome
    const train_detail::StepOutcome last = run->step->settle(tally);
    EXPECT_TRUE(last.settled && last.applied) << precision;
    EXPECT_EQ(tally.seen, 3.0 * batch) << precision;
    EXPECT_GT(tally.lossSum, 0.0) << precision;
  }
}

// A NaN loss at step 5 under train.nonfinite = skip: the device skips the
// update and restores the BatchNorm statistics; the host learns it a step
// later and counts it, and the run trains on.
TEST(GpuStep, ARefusedStepIsSkippedAndCountedOneStepLate) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  Config c = gpuRun();
  c.set("train.nonfinite=skip");
  c.set("fault.kind=nan");
  c.set("fault.step=5");
  const std::string dir = ::testing::TempDir() + "/gpu_step_skip";
  std::filesystem::remove_all(dir);
  auto comms = makeInProcessGroup(1);
  const TrainOptions o = quietRun(comms[0].get(), dir);
  auto jobs = seededJobs(1);
  const TrainResult r = train(c, o, jobs[0]);
  EXPECT_LT(r.lastLoss, r.firstLoss);
  const auto rows = readCsv(dir + "/metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("skipped_steps"), "1");
  EXPECT_EQ(rows[1].at("skipped_steps"), "0");
  for (const auto& b : jobs[0].model->buffers()) {
    EXPECT_TRUE(torch::isfinite(b.to(torch::kFloat)).all().item<bool>());
  }
}

std::vector<torch::Tensor> trainedWeights(Config c, const std::string& dir) {
  std::filesystem::remove_all(dir);
  auto comms = makeInProcessGroup(1);
  const TrainOptions o = quietRun(comms[0].get(), dir);
  auto jobs = seededJobs(1);
  train(c, o, jobs[0]);
  std::vector<torch::Tensor> out;
  for (const auto& p : jobs[0].model->parameters()) out.push_back(p.detach().to(torch::kCPU));
  for (const auto& b : jobs[0].model->buffers()) out.push_back(b.detach().to(torch::kCPU));
  return out;
}

// The captured step runs the eager step's kernels with the same values
// (read from device memory): 3 eager warm-up steps, then 29 replays over
// two epochs, the learning rate changing every step — the same bytes.
TEST(GpuStep, ACapturedStepTrainsToTheSameWeightsAsTheUncapturedOne) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  for (const char* precision : {"fp32", "fp16"}) {
    Config c = gpuRun();
    c.set("run.deterministic=true");
    c.set(std::string("amp.precision=") + precision);
    const auto eager = trainedWeights(c, ::testing::TempDir() + "/gpu_graph_off");
    c.set("run.cuda_graph=true");
    const int64_t before = train_detail::StepGraph::replays();
    const auto graphed = trainedWeights(c, ::testing::TempDir() + "/gpu_graph_on");
    EXPECT_EQ(train_detail::StepGraph::replays() - before, 29) << precision;
    ASSERT_EQ(eager.size(), graphed.size());
    for (size_t i = 0; i < eager.size(); ++i) {
      EXPECT_TRUE(torch::equal(eager[i], graphed[i]))
          << precision << " tensor " << i << ": max |diff| "
          << (eager[i].to(torch::kDouble) - graphed[i].to(torch::kDouble)).abs().max().item<double>();
    }
  }
}

// The same with ResNet-50 at fp16, channels-last, with model.fused_bn = on
// (asserted: cuDNN fused some case):
// the captured step replays the fused kernels, warmed up on the capture
// stream, and trains to the same bytes as the eager step. Small images
// (64 x 64) and 512 samples keep it to seconds: 4 steps of 128 per epoch,
// 3 eager warm-up steps, then 5 replays.
TEST(GpuStep, ACapturedResNet50WithFusedBatchNormTrainsToTheSameWeights) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  if (!fusedBatchNormAvailable()) GTEST_SKIP() << "a CUDA build without cuDNN's fused kernels";
  Config c = gpuRun();
  c.set("run.deterministic=true");
  c.set("amp.precision=fp16");
  c.set("model.name=resnet50");
  c.set("model.fused_bn=on");
  c.set("data.synthetic_shape=[3,64,64]");
  c.set("data.train_samples=512");
  c.set("data.eval_samples=128");
  // The recipe's own model (the job gives none): model.pt is what it trained.
  const auto trained = [&](const std::string& dir) {
    std::filesystem::remove_all(dir);
    auto comms = makeInProcessGroup(1);
    const TrainOptions o = quietRun(comms[0].get(), dir);
    TrainingJob job;
    train(c, o, job);
    return readStateDict(dir + "/model.pt");
  };
  const auto eager = trained(::testing::TempDir() + "/gpu_resnet_graph_off");
  ASSERT_GT(fusedBatchNormCases(), 0) << "model.fused_bn = on fused nothing";
  c.set("run.cuda_graph=true");
  const int64_t before = train_detail::StepGraph::replays();
  const auto graphed = trained(::testing::TempDir() + "/gpu_resnet_graph_on");
  EXPECT_EQ(train_detail::StepGraph::replays() - before, 5);
  ASSERT_EQ(eager.size(), graphed.size());
  ASSERT_GT(eager.size(), 300u) << "not ResNet-50's state";  // 161 parameters, 53 x 3 BN buffers
  for (const auto& entry : eager) {
    const torch::Tensor a = entry.value(), b = graphed.at(entry.key());
    EXPECT_TRUE(torch::equal(a, b))
        << entry.key() << ": max |diff| "
        << (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
  }
}

}  // namespace
}  // namespace bigbatch
