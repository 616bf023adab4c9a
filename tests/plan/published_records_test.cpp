// The model against ten published ImageNet runs (five ResNet-50 records,
// Horovod's 512-GPU VGG-16 and ResNet-101, MLPerf v4.0's ResNet-50 on 8,
// 16 and 64 H100): every published figure
// predicted within ±20 % from the stated hardware, one model and one set of
// defaults for all, and the figures said to test the network terms fail
// when the links are made free (docs/SCALE.md has the table and the
// sources).
#include "bigbatch/plan/published_records.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "bigbatch/common/error.h"
#include "bigbatch/plan/model_gradients.h"

namespace bigbatch::plan {
namespace {

TEST(PublishedRecords, EveryFigureWithinTwentyPercent) {
  std::set<std::string> ids;
  int figures = 0;
  for (const auto& record : publishedRecords()) {
    ids.insert(record.id);
    EXPECT_FALSE(record.sources.empty()) << record.id;
    const RecordPrediction p = predictRecord(record, imageNetElements(record.model));
    ASSERT_EQ(p.checks.size(), record.published.size()) << record.id;
    for (const auto& check : p.checks) {
      ++figures;
      EXPECT_GT(check.predicted, 0) << record.id << " " << check.figure;
      EXPECT_NEAR(check.ratio(), 1.0, 0.20) << record.id << " " << check.figure << ": published "
                                            << check.published << ", predicted " << check.predicted;
    }
  }
  EXPECT_EQ(ids, (std::set<std::string>{"goyal2017", "akiba2017", "jia2018", "mikami2018",
                                        "yamazaki2019", "horovod2018_vgg16",
                                        "horovod2018_resnet101", "mlperf40_eos_1node",
                                        "mlperf40_hpe_2nodes", "mlperf40_eos_8nodes"}));
  EXPECT_EQ(figures, 14);
}

// The check can fail for the right reason: on links of infinite bandwidth
// and no latency, exactly the figures marked network-bound leave ±20 % —
// so those test the exchange model, and the others are said not to.
TEST(PublishedRecords, NetworkBoundFiguresFailWithFreeLinks) {
  std::vector<std::string> networkBound;
  for (const auto& record : publishedRecords()) {
    const auto elements = imageNetElements(record.model);
    const RecordPrediction free = predictRecord(withFreeLinks(record), elements);
    ASSERT_EQ(free.checks.size(), record.published.size()) << record.id;
    for (size_t i = 0; i < free.checks.size(); ++i) {
      const std::string name = record.id + " " + record.published[i].name;
      const bool leaves = std::abs(free.checks[i].ratio() - 1.0) > 0.20;
      EXPECT_EQ(leaves, record.published[i].networkBound)
          << name << ": with free links the ratio is " << free.checks[i].ratio();
      EXPECT_FALSE(record.published[i].rests.empty()) << name;
      if (record.published[i].networkBound) networkBound.push_back(name);
    }
  }
  EXPECT_EQ(networkBound,
            (std::vector<std::string>{"yamazaki2019 img_s", "yamazaki2019 time_to_train_s",
                                      "horovod2018_vgg16 scaling_efficiency"}));
}

// The network-bound Horovod case is network-bound for the model's reason:
// at 100 Gb/s instead of 25 its predicted efficiency rises well past the
// published 68 %.
TEST(PublishedRecords, VggAtFourTimesTheBandwidthScalesBetter) {
  for (const auto& record : publishedRecords()) {
    if (record.id != "horovod2018_vgg16") continue;
    const auto elements = imageNetElements(record.model);
    PublishedRecord faster = record;
    faster.cluster.inter.gbps *= 4;
    const double at25 = predictRecord(record, elements).scalingEfficiency;
    const double at100 = predictRecord(faster, elements).scalingEfficiency;
    EXPECT_GT(at100, at25 + 0.15) << at25 << " -> " << at100;
    return;
  }
  FAIL() << "no horovod2018_vgg16 record";
}

// The published models' gradients: torchvision's parameter counts, and the
// counted bottleneck ResNet-50 matches the one bigbatch builds.
TEST(PublishedRecords, ModelGradientsHaveTorchvisionCounts) {
  auto total = [](const std::vector<double>& e) {
    return std::accumulate(e.begin(), e.end(), 0.0);
  };
  const auto built = resnet50ImageNetElements();
  const auto counted = bottleneckResNetElements({3, 4, 6, 3});
  EXPECT_EQ(total(built), 25557032);
  EXPECT_EQ(total(counted), 25557032);
  EXPECT_EQ(counted.size(), built.size());
  EXPECT_EQ(total(imageNetElements("resnet101")), 44549160);
  EXPECT_EQ(total(imageNetElements("vgg16")), 138357544);
  EXPECT_EQ(imageNetElements("vgg16").size(), 32u);
  EXPECT_THROW(imageNetElements("alexnet"), InvalidArgument);
}

// Nothing is fitted per record: the model's defaults are the same for all.
TEST(PublishedRecords, OneSetOfModelDefaults) {
  const StepInputs defaults;
  for (const auto& record : publishedRecords()) {
    const RecordPrediction p = predictRecord(record, imageNetElements(record.model));
    EXPECT_EQ(p.step.jitter, defaults.jitter) << record.id;
    EXPECT_EQ(p.step.backwardShare, defaults.backwardShare) << record.id;
    EXPECT_EQ(p.step.optimizerShare, defaults.optimizerShare) << record.id;
    // Each system's own bucket size: the model's default, Horovod's 64 MiB
    // (MLPerf's H100 runs are Horovod's too).
    const bool horovod = record.id.rfind("horovod", 0) == 0 || record.id.rfind("mlperf", 0) == 0;
    EXPECT_EQ(record.fusionBytes, horovod ? 64.0 * 1024 * 1024 : defaults.fusionBytes) << record.id;
  }
}

// MLPerf v4.0's H100 records share one device curve, fitted to two of the
// logs' steady-state rates; the 16-GPU run's rate at 200 a GPU is between
// them, not one of them — the check of the fixed cost per step. Without the
// fixed cost (the 400-GPU rate at every batch) the 64-GPU time would be
// predicted a third short: the check can fail.
TEST(PublishedRecords, TheH100CurveDecidesTheSmallBatchRuns) {
  for (const auto& record : publishedRecords()) {
    if (record.id.rfind("mlperf40", 0) != 0) continue;
    ASSERT_EQ(record.devicePoints.size(), 2u) << record.id;
    const DeviceCurve curve = DeviceCurve::fit(record.devicePoints);
    EXPECT_NEAR(curve.fixedS(), 3.663e-3, 0.01e-3);
    EXPECT_DOUBLE_EQ(record.deviceImgS, curve.imgS(record.batchPerDevice));
    if (record.id != "mlperf40_eos_8nodes") continue;
    PublishedRecord flat = record;
    flat.deviceImgS = 7161.2;  // the rate at 400, as if the batch did not matter
    const double ratio = predictRecord(flat, imageNetElements(flat.model)).checks[0].ratio();
    EXPECT_LT(ratio, 0.8) << "without a fixed cost per step the 64-GPU time comes out " << ratio;
  }
}

}  // namespace
}  // namespace bigbatch::plan
