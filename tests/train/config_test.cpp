// Config: schema checks, overrides, and the errors a user sees.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "bigbatch/common/config.h"
#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"

namespace bigbatch {
namespace {

// Asserts that `fn` throws InvalidArgument whose message contains every needle.
template <typename Fn>
void expectInvalid(Fn fn, std::initializer_list<const char*> needles) {
  try {
    fn();
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    for (const char* n : needles) {
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "message '" << e.what() << "' lacks '" << n << "'";
    }
  }
}

TEST(Config, DefaultsAndTomlOverlay) {
  Config c = defaultTrainingConfig();
  EXPECT_EQ(c.getInt("train.batch_size"), 128);
  EXPECT_FALSE(c.isSet("optim.lr"));
  c.mergeToml("[optim]\nlr = 2\n[model]\nwidths = [8, 16]\nblocks = [1, 1]\n", "test.toml");
  EXPECT_DOUBLE_EQ(c.getFloat("optim.lr"), 2.0);  // an integer is accepted for a float key
  EXPECT_TRUE(c.isSet("optim.lr"));
  EXPECT_EQ(c.getIntList("model.widths"), (std::vector<int64_t>{8, 16}));
}

TEST(Config, SetOverridesParseAsToml) {
  Config c = defaultTrainingConfig();
  c.set("optim.lr=0.25");
  c.set("model.name=resnet");  // bare word for a string key
  c.set("model.widths=[4,8,16]");
  c.set("data.flip=false");
  c.set("run.name=123");  // digits are a string for a string key
  EXPECT_EQ(c.getString("run.name"), "123");
  EXPECT_DOUBLE_EQ(c.getFloat("optim.lr"), 0.25);
  EXPECT_EQ(c.getString("model.name"), "resnet");
  EXPECT_EQ(c.getIntList("model.widths"), (std::vector<int64_t>{4, 8, 16}));
  EXPECT_FALSE(c.getBool("data.flip"));
}

TEST(Config, UnknownKeyNamesKeyAndSuggestion) {
  Config c = defaultTrainingConfig();
  expectInvalid([&] { c.mergeToml("[optim]\nlrr = 0.1\n", "recipe.toml"); },
                {"recipe.toml", "unknown config key 'optim.lrr'", "did you mean 'optim.lr'"});
  expectInvalid([&] { c.set("train.bogus=1"); }, {"unknown config key 'train.bogus'"});
}

// A recipe's [tune] table belongs to `bigbatch tune`: the training config
// skips it whole, and still refuses any other unknown table or key.
TEST(Config, TheTuneTableIsSkippedAndOtherUnknownTablesAreNot) {
  Config c = defaultTrainingConfig();
  c.mergeToml("[optim]\nlr = 0.3\n[tune]\nparams = [\"optim.lr=0.1:1:log\"]\ntrials = 4\n",
              "recipe.toml");
  EXPECT_DOUBLE_EQ(c.getFloat("optim.lr"), 0.3);
  EXPECT_EQ(c.toToml().find("[tune]"), std::string::npos);
  EXPECT_EQ(c.toToml().find("trials"), std::string::npos);
  EXPECT_THROW(c.mergeToml("[tuning]\ntrials = 4\n", "recipe.toml"), InvalidArgument);
  EXPECT_THROW(c.set("tune.trials=4"), InvalidArgument);
}

TEST(Config, WrongTypeNamesKeyAndType) {
  Config c = defaultTrainingConfig();
  expectInvalid([&] { c.mergeToml("[train]\nbatch_size = \"big\"\n", "r.toml"); },
                {"'train.batch_size'", "an integer", "a string"});
  expectInvalid([&] { c.set("train.epochs=2.5"); }, {"'train.epochs'", "an integer", "a float"});
  expectInvalid([&] { c.set("data.flip=maybe"); }, {"'maybe'", "boolean"});
}

TEST(Config, OutOfRangeAndChoices) {
  Config c = defaultTrainingConfig();
  expectInvalid([&] { c.set("train.batch_size=0"); }, {"'train.batch_size'", "out of range", "[1"});
  expectInvalid([&] { c.set("optim.lr=-1"); }, {"'optim.lr'", "out of range"});
  expectInvalid([&] { c.set("model.name=vgg"); }, {"'model.name'", "cnn, resnet, resnet50"});
  expectInvalid([&] { c.set("model.widths=[4,0]"); }, {"'model.widths'", "out of range"});
  expectInvalid([&] { c.set("nonsense"); }, {"expected key=value"});
}

TEST(Config, FusionBytesTakesAutoAsAWordAndRoundTrips) {
  Config c = defaultTrainingConfig();
  c.set("ddp.fusion_bytes=auto");
  EXPECT_EQ(c.getInt("ddp.fusion_bytes"), 0);  // 0 is auto
  c.set("ddp.fusion_bytes=16384");
  EXPECT_EQ(c.getInt("ddp.fusion_bytes"), 16384);
  c.mergeToml("[ddp]\nfusion_bytes = \"auto\"\n", "r.toml");
  EXPECT_EQ(c.getInt("ddp.fusion_bytes"), 0);
  // The resolved config (config.toml, checkpoints) reads back the same.
  Config again = defaultTrainingConfig();
  again.mergeToml(c.toToml(), "config.toml");
  EXPECT_EQ(again.getInt("ddp.fusion_bytes"), 0);
  // Other words stay errors for an integer key; other integer keys take no word.
  expectInvalid([&] { c.set("ddp.fusion_bytes=big"); }, {"ddp.fusion_bytes=big", "not an integer"});
  expectInvalid([&] { c.mergeToml("[ddp]\nfusion_bytes = \"fast\"\n", "r.toml"); },
                {"'ddp.fusion_bytes'", "an integer", "a string"});
  expectInvalid([&] { c.set("train.epochs=auto"); }, {"train.epochs=auto", "not an integer"});
  c.set("ddp.fusion_bytes=2");  // in range for the parser, not a whole float
  expectInvalid([&] { validateTrainingConfig(c); }, {"ddp.fusion_bytes = 2", "auto"});
}

TEST(Config, SyntaxErrorNamesFileAndLine) {
  Config c = defaultTrainingConfig();
  expectInvalid([&] { c.mergeToml("[train]\nepochs = = 3\n", "bad.toml"); },
                {"bad.toml:2", "TOML syntax error"});
}

TEST(Config, MissingFileIsIoError) {
  Config c = defaultTrainingConfig();
  EXPECT_THROW(c.mergeFile("/nonexistent/recipe.toml"), IoError);
}

TEST(Config, CrossKeyValidation) {
  Config c = defaultTrainingConfig();
  c.set("model.widths=[4,8]");
  expectInvalid([&] { validateTrainingConfig(c); }, {"model.widths", "model.blocks"});
  Config d = defaultTrainingConfig();
  d.set("train.epochs=2");
  d.set("schedule.warmup_epochs=3");
  expectInvalid([&] { validateTrainingConfig(d); }, {"warmup_epochs"});
}

// ddp.compression is refused, naming both keys and the fix, with what it
// cannot work beside: K-FAC, the partitioned optimizer, the NCCL
// exchange; an unknown codec and a rank of 0 by the schema. A 16-bit wire
// is taken (its factors go in 16 bits).
TEST(Config, CompressionRefusesWhatItCannotWorkWith) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"optim.kfac=true", {"ddp.compression = powersgd with optim.kfac"}},
      {"ddp.partition=\"optimizer\"", {"ddp.partition = optimizer", "ddp.partition = none"}},
  };
  for (const auto& [set, wanted] : cases) {
    Config c = defaultTrainingConfig();
    c.set("ddp.compression=\"powersgd\"");
    EXPECT_NO_THROW(validateTrainingConfig(c));
    c.set(set);
    try {
      validateTrainingConfig(c);
      ADD_FAILURE() << set << " was accepted with ddp.compression = powersgd";
    } catch (const InvalidArgument& e) {
      for (const auto& w : wanted) {
        EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what() << " lacks " << w;
      }
    }
  }
  // On GPUs compression runs on NCCL's stream too (the device codec): with
  // ddp.gpu_exchange = nccl what may refuse is the build or the machine
  // (the CPU build, no NCCL, no GPU), never the codec.
  Config onNccl = defaultTrainingConfig();
  onNccl.set("ddp.compression=\"powersgd\"");
  onNccl.set("run.device=\"cuda\"");
  onNccl.set("ddp.gpu_exchange=\"nccl\"");
  try {
    validateTrainingConfig(onNccl);
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).find("compression"), std::string::npos) << e.what();
    const std::string what = e.what();
    EXPECT_TRUE(what.find("run.device") != std::string::npos ||
                what.find("without NCCL") != std::string::npos)
        << what;
  }
  Config c = defaultTrainingConfig();
  expectInvalid([&] { c.set("ddp.compression=\"topk\""); }, {"ddp.compression", "none, powersgd"});
  expectInvalid([&] { c.set("ddp.powersgd_rank=0"); }, {"ddp.powersgd_rank", "[1, 1024]"});
}

TEST(Config, ResolvedTomlRoundTrips) {
  Config c = defaultTrainingConfig();
  c.set("optim.lr=0.3");
  c.set("run.name=with \"quotes\"");
  Config d = defaultTrainingConfig();
  d.mergeToml(c.toToml(), "resolved.toml");
  EXPECT_EQ(d.toToml(), c.toToml());
  EXPECT_DOUBLE_EQ(d.getFloat("optim.lr"), 0.3);
  EXPECT_EQ(d.getString("run.name"), "with \"quotes\"");
}

// Every recipe shipped in configs/ loads: known keys, values in range, the
// cross-key rules — a renamed key or a typo in a recipe fails here, not in
// a user's first run.
TEST(Config, EveryShippedRecipeLoadsAndValidates) {
  const char* src = std::getenv("BIGBATCH_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  int recipes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(src) + "/configs")) {
    if (entry.path().extension() != ".toml") continue;
    Config c = defaultTrainingConfig();
    EXPECT_NO_THROW({
      c.mergeFile(entry.path().string());
      validateTrainingConfig(c);
    }) << entry.path();
    ++recipes;
  }
  EXPECT_GE(recipes, 8);
}

}  // namespace
}  // namespace bigbatch
