// The model against five published ResNet-50/ImageNet runs: every published
// figure predicted within ±20 % from the stated hardware, one model and one
// set of defaults for all (docs/SCALE.md has the table and the sources).
#include "bigbatch/plan/published_records.h"

#include <gtest/gtest.h>

#include <set>

#include "bigbatch/plan/model_gradients.h"

namespace bigbatch::plan {
namespace {

TEST(PublishedRecords, EveryFigureWithinTwentyPercent) {
  const auto elements = resnet50ImageNetElements();
  std::set<std::string> ids;
  int figures = 0;
  for (const auto& record : publishedRecords()) {
    ids.insert(record.id);
    EXPECT_FALSE(record.sources.empty()) << record.id;
    const RecordPrediction p = predictRecord(record, elements);
    ASSERT_EQ(p.checks.size(), record.published.size()) << record.id;
    for (const auto& check : p.checks) {
      ++figures;
      EXPECT_GT(check.predicted, 0) << record.id << " " << check.figure;
      EXPECT_NEAR(check.ratio(), 1.0, 0.20) << record.id << " " << check.figure << ": published "
                                            << check.published << ", predicted " << check.predicted;
    }
  }
  EXPECT_EQ(ids, (std::set<std::string>{"goyal2017", "akiba2017", "jia2018", "mikami2018",
                                        "yamazaki2019"}));
  EXPECT_EQ(figures, 9);
}

// Nothing is fitted per record: the model's defaults are the same for all.
TEST(PublishedRecords, OneSetOfModelDefaults) {
  const StepInputs defaults;
  for (const auto& record : publishedRecords()) {
    const RecordPrediction p = predictRecord(record, resnet50ImageNetElements());
    EXPECT_EQ(p.step.jitter, defaults.jitter) << record.id;
    EXPECT_EQ(p.step.backwardShare, defaults.backwardShare) << record.id;
    EXPECT_EQ(p.step.optimizerShare, defaults.optimizerShare) << record.id;
    EXPECT_EQ(record.fusionBytes, defaults.fusionBytes) << record.id;
  }
}

}  // namespace
}  // namespace bigbatch::plan
