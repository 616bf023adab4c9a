// Every configuration key is declared once (src/train/recipe/recipe_keys.cpp),
// bound to its field of the run's recipe or saying where it is read, and
// resolveRecipe() puts what a config says where the run reads it — the keys
// that become flags or enums, the ones that go to two places and the
// fields derived from several keys included.
#include "recipe/recipe_keys.h"

#include <gtest/gtest.h>

#include <set>

#include "bigbatch/train/config_schema.h"
#include "recipe/recipe.h"

namespace bigbatch::train_detail {
namespace {

TEST(RecipeKeys, EachKeyIsDeclaredOnceAndBoundOrSaysWhereItIsRead) {
  std::set<std::string> seen;
  for (const RecipeKey& k : recipeKeys()) {
    EXPECT_TRUE(seen.insert(k.field.key).second) << k.field.key << " is declared twice";
    EXPECT_NE(static_cast<bool>(k.bind), !k.readBy.empty())
        << k.field.key << ": bound to the recipe, or read elsewhere (and where) — one of them";
  }
  EXPECT_EQ(seen.size(), trainingConfigSchema().size());
}

TEST(RecipeKeys, TheRecipeHoldsWhatTheConfigSays) {
  Config c = defaultTrainingConfig();
  for (const char* s :
       {"run.seed=9", "train.batch_size=64", "train.epochs=7", "optim.lr_per_256=0.4",
        "optim.momentum=0.8", "ddp.exchange_dtype=bf16", "ddp.partition=optimizer",
        "amp.loss_scaling=on", "amp.init_scale=1024", "optim.kfac=true",
        "optim.kfac_damping=0.01", "data.bad_samples=fail", "model.head_pool=3",
        "model.image_size=32", "schedule.batch_lr_rule=sqrt", "train.target_metric=top5",
        "train.nonfinite=skip", "comm.allreduce=ring", "mlperf.submission_org=us",
        "schedule.warmup_epochs=1.5", "data.read_threads=2", "fault.rank=3"}) {
    c.set(s);
  }
  const RunRecipe r = resolveRecipe(c, /*worldSize=*/2);
  EXPECT_EQ(r.seed, 9u);
  EXPECT_EQ(r.data.seed, 9u);  // run.seed goes to two places
  EXPECT_EQ(r.globalBatch, 128);
  EXPECT_DOUBLE_EQ(r.peakLr, 0.4 * 128 / 256);  // linear scaling from optim.lr_per_256
  EXPECT_DOUBLE_EQ(r.lr.baseLr, r.peakLr);
  EXPECT_DOUBLE_EQ(r.lr.totalEpochs, 7);
  EXPECT_DOUBLE_EQ(r.lr.warmupEpochs, 1.5);
  EXPECT_DOUBLE_EQ(r.momentum, 0.8);
  EXPECT_DOUBLE_EQ(r.optimizer.momentum, 0.8);
  EXPECT_EQ(r.ddp.exchangeType, DataType::kBFloat16);
  EXPECT_EQ(r.exchangeDtype, "bf16");
  EXPECT_TRUE(r.ddp.partition);
  EXPECT_EQ(r.ddp.allreduce, "ring");
  ASSERT_TRUE(r.lossScaler.has_value());
  EXPECT_DOUBLE_EQ(r.lossScaler->initScale, 1024);
  ASSERT_TRUE(r.kfac.has_value());
  EXPECT_DOUBLE_EQ(r.kfac->damping, 0.01);
  EXPECT_FALSE(r.pipeline.skipBadSamples);
  EXPECT_EQ(r.pipeline.readThreads, 2);
  EXPECT_EQ(modelOptions(r, 3, 100).headPool, 3);
  EXPECT_EQ(modelOptions(r, 3, 100).numClasses, 100);
  EXPECT_EQ(r.data.imageSize, 32);
  EXPECT_EQ(r.batchSchedule.lrRule, "sqrt");
  EXPECT_TRUE(r.targetTop5);
  EXPECT_TRUE(r.step.skipNonFinite);
  EXPECT_EQ(r.fault.rank, 3);
  EXPECT_EQ(r.mlperf.org, "us");
  EXPECT_TRUE(r.optimizer.checkFinite);

  // The defaults: optim.lr as it is, loss scaling off in fp32, no K-FAC.
  const RunRecipe d = resolveRecipe(defaultTrainingConfig(), 1);
  EXPECT_DOUBLE_EQ(d.peakLr, 0.1);
  EXPECT_FALSE(d.lossScaler.has_value());
  EXPECT_FALSE(d.kfac.has_value());
  EXPECT_EQ(d.ddp.exchangeType, DataType::kFloat32);
  // fp16 on the wire turns auto loss scaling on.
  Config wire = defaultTrainingConfig();
  wire.set("ddp.exchange_dtype=fp16");
  EXPECT_TRUE(resolveRecipe(wire, 1).lossScaler.has_value());
}

}  // namespace
}  // namespace bigbatch::train_detail
