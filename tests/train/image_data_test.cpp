// The trainer on CIFAR-10-format files and on image folders (generated here):
// end to end (loss falls, top-5 >= top-1, metrics and MLPerf log carry both),
// the ResNet-50 recipe for two steps, train.target_metric, and the named
// errors for bad data.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "bigbatch/common/error.h"
#include "bigbatch/data/image_source.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/train/trainer.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / (name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void writeFile(const fs::path& p, const std::vector<uint8_t>& bytes) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

// An image whose colour says its class: channel (label % 3) bright, the
// others dark, plus noise — learnable in a few steps.
Image classImage(int label, int64_t h, int64_t w, std::mt19937& rng) {
  Image im;
  im.height = h;
  im.width = w;
  im.channels = 3;
  im.pixels.resize(static_cast<size_t>(h * w * 3));
  std::uniform_int_distribution<int> noise(0, 40);
  for (int64_t i = 0; i < h * w; ++i)
    for (int c = 0; c < 3; ++c)
      im.pixels[i * 3 + c] =
          static_cast<uint8_t>((c == label % 3 ? 180 : 30) + noise(rng) + (label / 3) * 20);
  return im;
}

// CIFAR-10 binary batches: 1 label byte + R, G, B planes of 32x32.
void writeCifar(const fs::path& dir, int perFile) {
  std::mt19937 rng(7);
  auto batch = [&](const std::string& name) {
    std::vector<uint8_t> bytes;
    for (int r = 0; r < perFile; ++r) {
      const int label = r % 10;
      const Image im = classImage(label, 32, 32, rng);
      bytes.push_back(static_cast<uint8_t>(label));
      for (int c = 0; c < 3; ++c)
        for (int i = 0; i < 32 * 32; ++i) bytes.push_back(im.pixels[i * 3 + c]);
    }
    writeFile(dir / name, bytes);
  };
  for (int b = 1; b <= 5; ++b) batch("data_batch_" + std::to_string(b) + ".bin");
  batch("test_batch.bin");
}

// root/{train,val}/<class>/<n>.jpg
void writeFolder(const fs::path& root, int classes, int trainPer, int valPer, int64_t h,
                 int64_t w) {
  std::mt19937 rng(11);
  for (const auto& [split, n] : {std::pair{"train", trainPer}, std::pair{"val", valPer}}) {
    for (int k = 0; k < classes; ++k) {
      const fs::path dir = root / split / ("class_" + std::to_string(k));
      fs::create_directories(dir);
      for (int i = 0; i < n; ++i)
        writeFile(dir / (std::to_string(i) + ".jpg"), encodeJpeg(classImage(k, h, w, rng), 90));
    }
  }
}

Config smallConfig(const fs::path& runDir) {
  Config c = defaultTrainingConfig();
  c.set("model.widths=[8, 16, 16]");
  c.set("model.blocks=[1, 1, 1]");
  c.set("train.batch_size=25");
  c.set("train.epochs=3");
  c.set("train.stop_at_target=false");
  c.set("run.threads=2");
  c.set("run.dir=\"" + runDir.string() + "\"");
  return c;
}

TrainResult trainQuietly(const Config& c) {
  TrainOptions o;
  o.verbosity = Verbosity::kQuiet;
  o.overwrite = true;  // the error cases reuse one run directory
  return train(c, o);
}

nlohmann::json summaryOf(const fs::path& runDir) {
  std::ifstream in(runDir / "summary.json");
  return nlohmann::json::parse(in);
}

// Every line of mlperf.log is a well-formed MLLOG record; the eval_accuracy
// points carry top-5 in their metadata.
int evalAccuracyPoints(const fs::path& runDir) {
  std::ifstream in(runDir / "mlperf.log");
  int points = 0;
  for (std::string line; std::getline(in, line);) {
    EXPECT_EQ(line.rfind(":::MLLOG {", 0), 0u) << line;
    const auto j = nlohmann::json::parse(line.substr(9));
    if (j["key"] == "eval_accuracy") {
      ++points;
      EXPECT_GE(j["metadata"]["top5"].get<double>(), j["value"].get<double>()) << line;
    }
  }
  return points;
}

TEST(ImageData, CifarFormatTrainsEndToEnd) {
  const fs::path data = scratch("cifar_data"), run = scratch("cifar_run");
  writeCifar(data, 50);  // 250 train, 50 test
  Config c = smallConfig(run);
  c.set("data.dataset=\"cifar10\"");
  c.set("data.path=\"" + data.string() + "\"");
  c.set("data.pad_crop=4");
  const TrainResult r = trainQuietly(c);
  EXPECT_EQ(r.steps, 3 * 10);
  EXPECT_LT(r.lastLoss, 0.8 * r.firstLoss);
  EXPECT_GT(r.finalAccuracy, 0.3);  // chance is 0.1
  EXPECT_GE(r.finalTop5, r.finalAccuracy);
  const auto s = summaryOf(run);
  EXPECT_DOUBLE_EQ(s["final_top5"].get<double>(), r.finalTop5);
  EXPECT_EQ(s["target_metric"], "top1");
  EXPECT_EQ(evalAccuracyPoints(run), 3);
  std::ifstream csv(run / "metrics.csv");
  std::string header;
  std::getline(csv, header);
  EXPECT_NE(header.find(",test_top5"), std::string::npos) << header;
  fs::remove_all(data);
  fs::remove_all(run);
}

TEST(ImageData, FolderTrainsEndToEndThroughThePipeline) {
  const fs::path data = scratch("folder_data"), run = scratch("folder_run");
  writeFolder(data, 6, 25, 5, 40, 48);  // 150 train, 30 val
  Config c = smallConfig(run);
  c.set("data.dataset=\"folder\"");
  c.set("data.path=\"" + data.string() + "\"");
  c.set("model.image_size=24");
  c.set("data.crop_scale=[0.35, 1.0]");
  c.set("data.read_threads=1");
  c.set("data.decode_threads=1");
  c.set("data.augment_threads=1");
  c.set("data.cache_mb=16");
  const TrainResult r = trainQuietly(c);
  EXPECT_EQ(r.steps, 3 * 6);
  EXPECT_LT(r.lastLoss, 0.8 * r.firstLoss);
  EXPECT_GT(r.finalAccuracy, 1.0 / 3);  // chance is 1/6
  EXPECT_GE(r.finalTop5, r.finalAccuracy);
  EXPECT_EQ(evalAccuracyPoints(run), 3);
  fs::remove_all(data);
  fs::remove_all(run);
}

// A top-5 target is reached where the top-1 one is not.
TEST(ImageData, TargetMetricTop5) {
  const fs::path data = scratch("top5_data"), run = scratch("top5_run");
  writeCifar(data, 50);
  Config c = smallConfig(run);
  c.set("data.dataset=\"cifar10\"");
  c.set("data.path=\"" + data.string() + "\"");
  c.set("train.epochs=1");
  c.set("train.target_metric=\"top5\"");
  c.set("train.target_accuracy=0.5");
  const TrainResult r = trainQuietly(c);
  EXPECT_EQ(r.targetMetric, "top5");
  EXPECT_EQ(r.reachedTarget, r.finalTop5 >= 0.5) << r.finalTop5;
  EXPECT_GE(r.finalTop5, 0.5);  // 10 classes: top-5 of a trained model is well above 0.5
  EXPECT_EQ(summaryOf(run)["target_metric"], "top5");
  fs::remove_all(data);
  fs::remove_all(run);
}

// configs/resnet50_imagenet.toml, as written, for two steps of 4 images on a
// generated 2-class folder at 224x224 (its MLPerf log has the ResNet keys).
TEST(ImageData, ResNet50RecipeRunsTwoSteps) {
  const fs::path data = scratch("r50_data"), run = scratch("r50_run");
  writeFolder(data, 2, 4, 2, 256, 300);
  Config c = defaultTrainingConfig();
  const char* src = std::getenv("BIGBATCH_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  c.mergeFile(std::string(src) + "/configs/resnet50_imagenet.toml");
  c.set("data.path=\"" + data.string() + "\"");
  c.set("run.dir=\"" + run.string() + "\"");
  c.set("run.threads=2");
  c.set("train.batch_size=4");
  c.set("train.eval_batch_size=4");
  c.set("train.epochs=1");
  c.set("schedule.warmup_epochs=1");  // the recipe's 5 cannot fit in 1 epoch
  const TrainResult r = trainQuietly(c);
  EXPECT_EQ(r.steps, 2);
  EXPECT_TRUE(std::isfinite(r.lastLoss));
  std::ifstream in(run / "mlperf.log");
  std::stringstream log;
  log << in.rdbuf();
  for (const char* key :
       {"\"model_bn_span\"", "\"lars_opt_base_learning_rate\"", "\"lars_opt_weight_decay\"",
        "\"eval_samples\"", "\"eval_accuracy\"", "\"train_samples\""})
    EXPECT_NE(log.str().find(key), std::string::npos) << key;
  fs::remove_all(data);
  fs::remove_all(run);
}

void expectDataError(const Config& c, const std::string& words) {
  try {
    trainQuietly(c);
    ADD_FAILURE() << "no error; expected: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(ImageData, BadDataIsNamedBeforeTraining) {
  const fs::path data = scratch("bad_data"), run = scratch("bad_run");
  writeFolder(data, 2, 2, 1, 20, 20);
  Config c = smallConfig(run);
  c.set("data.dataset=\"folder\"");
  c.set("data.path=\"" + data.string() + "\"");
  c.set("model.image_size=16");

  fs::create_directories(data / "train" / "class_9");  // a class val lacks
  expectDataError(c, "class folder 'class_9' is in");
  fs::remove_all(data / "train" / "class_9");

  fs::rename(data / "val", data / "validation");  // the split is missing
  expectDataError(c, "the val split '" + (data / "val").string() + "' is not a directory");
  fs::rename(data / "validation", data / "val");

  Config noPath = smallConfig(run);
  noPath.set("data.dataset=\"folder\"");
  expectDataError(noPath, "needs data.path");

  Config cifar = smallConfig(run);
  cifar.set("data.dataset=\"cifar10\"");
  cifar.set("data.path=\"" + data.string() + "\"");
  expectDataError(cifar, "data_batch_1.bin");

  Config fashion = smallConfig(run);
  fashion.set("model.image_size=32");
  expectDataError(fashion, "model.image_size = 32");
  fs::remove_all(data);
  fs::remove_all(run);
}

// An unreadable image in the validation split is skipped (and not counted)
// under data.bad_samples = "skip", and stops the run naming it under "fail".
TEST(ImageData, CorruptValidationImageSkippedOrNamed) {
  const fs::path data = scratch("corrupt_data"), run = scratch("corrupt_run");
  writeFolder(data, 2, 10, 3, 24, 24);
  writeFile(data / "val" / "class_1" / "broken.jpg", {0xFF, 0xD8, 0xFF, 0x00, 0x01});
  Config c = smallConfig(run);
  c.set("data.dataset=\"folder\"");
  c.set("data.path=\"" + data.string() + "\"");
  c.set("model.image_size=16");
  c.set("train.epochs=1");
  const TrainResult r = trainQuietly(c);
  EXPECT_GE(r.finalAccuracy, 0.0);
  fs::remove_all(run);
  fs::create_directories(run);
  c.set("data.bad_samples=\"fail\"");
  expectDataError(c, "broken.jpg");
  fs::remove_all(data);
  fs::remove_all(run);
}

}  // namespace
}  // namespace bigbatch
