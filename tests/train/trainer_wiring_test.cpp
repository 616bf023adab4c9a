// What the recipe sets reaches the step and the report: the first step's
// loss is train.label_smoothing's cross entropy, weight decay reaches the
// regular weights only, and the accuracy a run reports is that of the model
// it saved. (trainer_test.cpp: a short run's files, and what is refused.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/data/batch.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/train/trainer.h"
#include "run_helpers.h"

namespace bigbatch {
namespace {

using namespace test_runs;

// One step on the first 64 Fashion-MNIST training images, all in one batch,
// from the seed's model; `onStep` gets the step's loss.
TrainResult oneStep(Config c, const std::string& name, std::shared_ptr<ImageClassifierImpl> model,
                    double* loss) {
  const std::string dir = ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  c.set("data.train_samples=64");
  c.set("data.eval_samples=100");
  c.set("train.batch_size=64");
  c.set("train.epochs=1");
  c.set("data.flip=false");
  c.set("run.threads=1");
  TrainOptions o;
  o.runDir = dir;
  o.verbosity = Verbosity::kQuiet;
  o.onStep = [&](const StepRecord& r) { *loss = r.loss; };
  TrainingJob job;
  job.model = std::move(model);
  TrainResult r = train(c, o, job);
  std::filesystem::remove_all(dir);
  return r;
}

// The trainer's loss is train.label_smoothing's: the first step's loss —
// before any update — is (1-α)·CE + α·mean_k(-log p_k) of the same seeded
// model on the same 64 images, computed here from the formula.
TEST(TrainerWiring, TheLossIsTheLabelSmoothedCrossEntropy) {
  const double alpha = 0.3;
  Config c = defaultTrainingConfig();
  c.set(fmt::format("train.label_smoothing={}", alpha));
  double trainerLoss = 0;
  oneStep(c, "smoothing", seededModel(), &trainerLoss);

  const Dataset data = takeFirst(loadFashionMnist("", "train"), 64);
  std::vector<int64_t> all(64);
  for (int64_t i = 0; i < 64; ++i) all[i] = i;
  const Batch b = assembleBatch(data, all, AugmentOptions{}, 0, 0, /*channelsLast=*/true);
  auto model = seededModel();
  {
    torch::NoGradGuard noGrad;
    for (auto& p : model->parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }
  model->train();  // BatchNorm on the batch's statistics, as in training
  torch::NoGradGuard noGrad;
  const torch::Tensor logp = torch::log_softmax(model->forward(b.images).to(torch::kDouble), 1);
  const torch::Tensor ce = -logp.gather(1, b.labels.unsqueeze(1)).squeeze(1);
  const double plain = ce.mean().item<double>();
  const double smoothed = ((1 - alpha) * ce - alpha * logp.mean(1)).mean().item<double>();
  EXPECT_NEAR(trainerLoss, smoothed, 1e-5 * smoothed);
  EXPECT_GT(std::abs(smoothed - plain), 100 * 1e-5 * smoothed);  // the test can tell them apart
}

// optim.weight_decay reaches the regular weights and not the excluded ones:
// after one Nesterov SGD step from the same weights on the same batch, the
// weights with decay differ from those without by -lr·(1+m)·wd·w0 exactly
// (the gradient is the same), BatchNorm parameters and biases not at all.
TEST(TrainerWiring, WeightDecayReachesTheRegularWeightsOnly) {
  const double lr = 0.1, momentum = 0.9, wd = 0.05;
  auto run = [&](double decay) {
    Config c = defaultTrainingConfig();
    c.set(fmt::format("optim.lr={}", lr));
    c.set(fmt::format("optim.momentum={}", momentum));
    c.set("optim.nesterov=true");
    c.set(fmt::format("optim.weight_decay={}", decay));
    c.set("schedule.warmup_epochs=0");  // the first step at the peak lr
    auto model = seededModel();
    double loss = 0;
    oneStep(c, fmt::format("decay_{}", decay), model, &loss);
    return model;
  };
  const auto w0 = seededModel()->named_parameters();
  const auto without = run(0.0)->named_parameters();
  const auto with = run(wd)->named_parameters();
  int regular = 0;
  for (const auto& item : w0) {
    const std::string& name = item.key();
    const torch::Tensor diff = with[name] - without[name];
    if (item.value().dim() <= 1) {  // BatchNorm weights and biases: excluded
      EXPECT_TRUE(torch::equal(with[name], without[name])) << name;
      continue;
    }
    ++regular;
    const torch::Tensor want = -lr * (1 + momentum) * wd * item.value();
    EXPECT_TRUE(torch::allclose(diff, want, 1e-3, 1e-6)) << name;
    EXPECT_GT(want.abs().max().item<double>(), 1e-4) << name;  // large enough to see
  }
  EXPECT_EQ(regular, 6);  // five convolutions and the classifier
}

// With two ranks, evaluation and model.pt use the same BatchNorm statistics
// (their mean over the ranks): the accuracy reported is that of the model
// each rank holds afterwards, evaluated here on the whole test set.
TEST(TrainerWiring, ReportedAccuracyIsThatOfTheSavedModel) {
  const std::string dir = ::testing::TempDir() + "/bn_stats_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  Config c = defaultTrainingConfig();
  c.set("data.train_samples=2048");
  c.set("data.eval_samples=1000");
  c.set("train.epochs=1");
  c.set("train.batch_size=64");
  c.set("run.threads=1");
  std::vector<TrainingJob> jobs = seededJobs(2);
  const RankRuns runs = trainInProcess(c, dir, jobs);
  ASSERT_TRUE(runs.errors[0].empty() && runs.errors[1].empty())
      << runs.errors[0] << " / " << runs.errors[1];
  const auto b0 = jobs[0].model->named_buffers(), b1 = jobs[1].model->named_buffers();
  for (const auto& item : b0) {
    EXPECT_TRUE(torch::equal(item.value(), b1[item.key()])) << item.key();
  }
  // Rank 0's model, as model.pt has it, on all 1,000 test images.
  const auto saved = readStateDict(dir + "/model.pt");
  auto model = seededModel();
  {
    torch::NoGradGuard noGrad;
    for (auto& item : model->named_parameters()) item.value().copy_(saved.at(item.key()));
    for (auto& item : model->named_buffers()) item.value().copy_(saved.at(item.key()));
  }
  // Evaluated as the ranks do (channels-last, one batch per rank's half),
  // so no kernel's rounding can flip a borderline image.
  torch::NoGradGuard noGrad;
  for (auto& p : model->parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
  model->eval();
  const Dataset test = takeFirst(loadFashionMnist("", "test"), 1000);
  int64_t correct = 0;
  for (int64_t half = 0; half < 2; ++half) {
    std::vector<int64_t> idx(500);
    for (int64_t i = 0; i < 500; ++i) idx[i] = half * 500 + i;
    const Batch b = assembleBatch(test, idx, AugmentOptions{}, 0, 0, /*channelsLast=*/true);
    correct += model->forward(b.images).argmax(1).eq(b.labels).sum().item<int64_t>();
  }
  EXPECT_EQ(runs.results[0].finalAccuracy, correct / 1000.0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace bigbatch
