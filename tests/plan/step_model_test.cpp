// The plan's step model: its timeline by hand, its terms, and its errors.
#include "bigbatch/plan/step_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "bigbatch/common/error.h"
#include "bigbatch/ddp/bucket_layout.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/plan/allreduce_cost.h"
#include "bigbatch/plan/model_gradients.h"

namespace bigbatch::plan {
namespace {

constexpr double kMB = 1e6;

// Two devices on one node whose link moves 4 MB in exactly 10 ms (α = 0):
// ring on 2 devices = 2 messages of S/2, so β·S = 10 ms for S = 4 MB.
Cluster twoDevices() {
  Cluster c;
  c.devices = 2;
  c.devicesPerNode = 2;
  c.intra = {4 * kMB * 8 / 0.010 / 1e9, 0};  // 3.2 Gb/s
  return c;
}

StepInputs twoBuckets() {
  StepInputs in;
  in.deviceImgS = 100;
  in.batchPerDevice = 30;  // compute 0.3 s: forward 0.1, backward 0.2
  in.tensorBytes = {4 * kMB, 4 * kMB};
  in.fusionBytes = 4 * kMB;
  in.allreduce = "ring";
  in.jitter = 0;
  return in;
}

TEST(StepModel, OneDeviceIsItsComputeAlone) {
  StepInputs in = twoBuckets();
  in.jitter = 0.05;
  Cluster one;
  const StepPrediction p = predictStep(in, one);
  EXPECT_DOUBLE_EQ(p.stepS, 0.3);
  EXPECT_DOUBLE_EQ(p.imgS, 100);
  EXPECT_DOUBLE_EQ(p.scalingEfficiency, 1);
  EXPECT_EQ(p.exchangeS, 0);
  EXPECT_EQ(p.syncS, 0);
}

// Bucket 1 is ready at half of backward (0.1 s in), done at 0.11; bucket 2
// is ready at the end of backward (0.2) and done at 0.21: 10 ms exposed.
TEST(StepModel, TimelineOfTwoBucketsByHand) {
  const StepPrediction p = predictStep(twoBuckets(), twoDevices());
  EXPECT_EQ(p.buckets, 2);
  EXPECT_NEAR(p.exchangeS, 0.020, 1e-12);
  EXPECT_NEAR(p.exposedExchangeS, 0.010, 1e-12);
  EXPECT_NEAR(p.stepS, 0.310, 1e-12);
  EXPECT_NEAR(p.imgS, 60 / 0.310, 1e-9);
  EXPECT_NEAR(p.scalingEfficiency, 0.3 / 0.31, 1e-12);
  EXPECT_EQ(p.algorithm, "ring");
}

TEST(StepModel, WithoutOverlapEveryBucketWaitsForBackward) {
  StepInputs in = twoBuckets();
  in.overlap = false;
  const StepPrediction p = predictStep(in, twoDevices());
  EXPECT_NEAR(p.exposedExchangeS, 0.020, 1e-12);
  EXPECT_NEAR(p.stepS, 0.320, 1e-12);
}

// A slow link: bucket 1 (ready at 0.1 s) takes 0.15 s and delays bucket 2,
// which starts at 0.25 and ends at 0.40: 0.20 s exposed.
TEST(StepModel, ABacklogCarriesIntoTheNextBucket) {
  Cluster c = twoDevices();
  c.intra.gbps /= 15;
  const StepPrediction p = predictStep(twoBuckets(), c);
  EXPECT_NEAR(p.exposedExchangeS, 0.20, 1e-12);
}

TEST(StepModel, OptimizerStepRunsAfterTheExchange) {
  StepInputs in = twoBuckets();
  in.backwardShare = 0.5;   // backward 0.15 s
  in.optimizerShare = 0.2;  // 0.06 s, after the exchange
  const StepPrediction p = predictStep(in, twoDevices());
  // Buckets ready at 0.075 and 0.15, done at 0.085 and 0.16.
  EXPECT_NEAR(p.exposedExchangeS, 0.010, 1e-12);
  EXPECT_NEAR(p.stepS, 0.310, 1e-12);
}

TEST(StepModel, SyncIsTheGaussianMaximumOfNDevices) {
  StepInputs in = twoBuckets();
  in.jitter = 0.1;
  Cluster c = twoDevices();
  c.devices = 4;
  c.devicesPerNode = 4;
  const StepPrediction p = predictStep(in, c);
  EXPECT_NEAR(p.syncS, 0.3 * 0.1 * std::sqrt(2 * std::log(4.0)), 1e-12);
}

TEST(StepModel, RunTimeIsEpochsOverRatePlusEvaluations) {
  StepInputs in = twoBuckets();
  RunInputs run{10, 60000, 10000, 2};
  const RunPrediction r = predictRun(in, twoDevices(), run);
  EXPECT_NEAR(r.trainS, 10 * 60000 / r.step.imgS, 1e-9);
  // 5 evaluations of 10,000 at forward-only speed: 2 devices × 100 img/s ÷ (1/3).
  EXPECT_NEAR(r.evalS, 5 * 10000 / (2 * 100 * 3.0), 1e-9);
  EXPECT_NEAR(r.timeToTrainS, r.trainS + r.evalS, 1e-9);
  EXPECT_EQ(r.stepsPerEpoch, 1000);  // 60000 / (2 × 30)
}

TEST(StepModel, RecommendationIsTheFastestCandidate) {
  StepInputs in = twoBuckets();
  in.tensorBytes = uniformTensors(100 * kMB);
  Cluster c;
  c.devices = 64;
  c.devicesPerNode = 8;
  const Recommendation best = recommend(in, c);
  for (const auto& algorithm : plannedAlgorithms()) {
    for (double mb : {1.0, 8.0, 64.0}) {
      in.allreduce = algorithm;
      in.fusionBytes = mb * 1024 * 1024;
      EXPECT_LE(best.step.stepS, predictStep(in, c).stepS) << algorithm << " " << mb;
    }
  }
}

// The plan packs buckets as the DDP engine does (ddp/bucket_layout.h).
TEST(StepModel, BucketsMatchTheDdpLayout) {
  ModelOptions options;  // the default recipe's model
  options.widths = {64, 128, 256};
  const std::vector<double> elements = gradientElements(options);
  std::vector<double> bytes;
  for (double e : elements) bytes.push_back(4 * e);
  // layoutBuckets takes registration order and walks it backwards.
  std::vector<int64_t> numels(elements.rbegin(), elements.rend());
  for (size_t fusion : {size_t{4096}, size_t{256 * 1024}, size_t{1 << 20}}) {
    const auto expected = layoutBuckets(numels, fusion, 4, kParameterAlignElements);
    const auto mine = packBuckets(bytes, static_cast<double>(fusion));
    ASSERT_EQ(mine.size(), expected.size()) << fusion;
    for (size_t i = 0; i < mine.size(); ++i) EXPECT_EQ(mine[i], 4.0 * expected[i].numel);
  }
}

TEST(StepModel, UniformTensorsAreMiBPieces) {
  const auto t = uniformTensors(2.5 * 1024 * 1024);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0], 1024 * 1024);
  EXPECT_EQ(t[2], 512 * 1024);
}

TEST(StepModel, ResNet50IsTorchvisionsParameterSet) {
  const auto e = resnet50ImageNetElements();
  EXPECT_EQ(e.size(), 161u);
  double total = 0;
  for (double x : e) total += x;
  EXPECT_EQ(total, 25557032);
  EXPECT_EQ(e.front(), 1000);  // fc.bias: the first gradient backward produces
}

// The link found reproduces the ratio asked for; out-of-reach ratios and a
// single node are refused by name.
TEST(StepModel, LinkForARatioReproducesIt) {
  StepInputs in = twoBuckets();
  Cluster c = twoDevices();
  c.devicesPerNode = 1;  // two nodes of one
  c.inter.latencyUs = 10;
  const double gbps = interGbpsForRatio(in, c, 0.25);
  c.inter.gbps = gbps;
  const StepPrediction p = predictStep(in, c);
  EXPECT_NEAR(p.exchangeS / p.computeS, 0.25, 1e-6);
  // Two buckets of 4 MB, each 2 messages of 2 MB on a ring of 2: 8 MB and 40 us
  // of latency in 0.075 s = 0.25 x 0.3 s, so 8e6 x 8 / (0.075 - 40e-6) bit/s.
  EXPECT_NEAR(gbps, 8e6 * 8 / (0.075 - 40e-6) / 1e9, 1e-6);
  EXPECT_THROW(interGbpsForRatio(in, c, 1e-5), InvalidArgument);  // latency alone is more
  EXPECT_THROW(interGbpsForRatio(in, twoDevices(), 0.25), InvalidArgument);  // one node
}

TEST(StepModel, BadInputIsNamed) {
  auto expectError = [](StepInputs in, Cluster c, const char* words) {
    try {
      predictStep(in, c);
      ADD_FAILURE() << "no error for " << words;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  Cluster c = twoDevices();
  StepInputs in = twoBuckets();
  in.deviceImgS = 0;
  expectError(in, c, "--device-img-s");
  in = twoBuckets();
  in.tensorBytes.clear();
  expectError(in, c, "--grad-mb");
  in = twoBuckets();
  in.backwardShare = 0.8;
  in.optimizerShare = 0.3;
  expectError(in, c, "--optimizer-share");
  Cluster bad = c;
  bad.devices = 12;
  bad.devicesPerNode = 8;
  expectError(twoBuckets(), bad, "not a multiple of --devices-per-node 8");
  bad = c;
  bad.inter.gbps = 0;
  expectError(twoBuckets(), bad, "--inter-gbps 0");
}

}  // namespace
}  // namespace bigbatch::plan
