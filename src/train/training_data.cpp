#include "training_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "bigbatch/common/error.h"
#include "bigbatch/data/gpu_jpeg_decoder.h"
#include "recipe/recipe.h"

namespace bigbatch::train_detail {
namespace {

namespace fs = std::filesystem;

// Per-channel statistics of the usual kind for each source (0..1 scale).
const std::vector<float> kImageNetMean = {0.485f, 0.456f, 0.406f};
const std::vector<float> kImageNetStd = {0.229f, 0.224f, 0.225f};
const std::vector<float> kCifarMean = {0.4914f, 0.4822f, 0.4465f};
const std::vector<float> kCifarStd = {0.2470f, 0.2435f, 0.2616f};

// n samples of `base`, spread evenly over it (a class-sorted folder keeps
// every class); n <= 0 or >= its size: all of them.
class SubsetSource final : public ImageSource {
 public:
  SubsetSource(std::shared_ptr<const ImageSource> base, int64_t n) : base_(std::move(base)) {
    const int64_t size = base_->size();
    for (int64_t i = 0; i < n; ++i) index_.push_back(i * size / n);
  }
  std::string kind() const override { return base_->kind(); }
  int64_t size() const override { return static_cast<int64_t>(index_.size()); }
  int64_t numClasses() const override { return base_->numClasses(); }
  int64_t channels() const override { return base_->channels(); }
  int64_t label(int64_t i) const override { return base_->label(index_[i]); }
  ImageSize fixedSize() const override { return base_->fixedSize(); }
  std::string where(int64_t i) const override { return base_->where(index_[i]); }
  void read(int64_t i, std::vector<uint8_t>& bytes) const override {
    base_->read(index_[i], bytes);
  }
  ImageSize peek(const std::vector<uint8_t>& bytes) const override { return base_->peek(bytes); }
  Image decode(const std::vector<uint8_t>& bytes, const DecodeRequest& r) const override {
    return base_->decode(bytes, r);
  }

 private:
  std::shared_ptr<const ImageSource> base_;
  std::vector<int64_t> index_;
};

std::shared_ptr<const ImageSource> subset(std::shared_ptr<const ImageSource> s, int64_t n) {
  if (n <= 0 || n >= s->size()) return s;
  return std::make_shared<SubsetSource>(std::move(s), n);
}

std::vector<std::string> classFolders(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// data.train_dir / data.val_dir, or data.path's train/ and val/; both must
// exist and hold the same class folders (labels are positions in the
// sorted list, so a class missing on one side would shift every label).
void resolveFolders(const DataOptions& o, std::string& trainDir, std::string& valDir) {
  trainDir = o.trainDir;
  valDir = o.valDir;
  if (trainDir.empty() || valDir.empty()) {
    BIGBATCH_REQUIRE(!o.path.empty(), InvalidArgument,
                     "data.dataset = \"folder\" needs data.path (a root with train/ and val/) or "
                     "both data.train_dir and data.val_dir");
    if (trainDir.empty()) trainDir = (fs::path(o.path) / "train").string();
    if (valDir.empty()) valDir = (fs::path(o.path) / "val").string();
  }
  for (const auto& [key, dir] : {std::pair{"train", trainDir}, std::pair{"val", valDir}}) {
    BIGBATCH_REQUIRE(fs::is_directory(dir), IoError,
                     "the {} split '{}' is not a directory; an image folder root holds train/ "
                     "and val/, each with one sub-folder of JPEGs per class (or set "
                     "data.train_dir and data.val_dir)",
                     key, dir);
  }
  const auto train = classFolders(trainDir), val = classFolders(valDir);
  const std::set<std::string> inVal(val.begin(), val.end()), inTrain(train.begin(), train.end());
  for (const auto& c : train) {
    BIGBATCH_REQUIRE(inVal.count(c), IoError,
                     "class folder '{}' is in {} but not in {}: both splits need the same "
                     "classes (labels are their positions in name order)",
                     c, trainDir, valDir);
  }
  for (const auto& c : val) {
    BIGBATCH_REQUIRE(inTrain.count(c), IoError,
                     "class folder '{}' is in {} but not in {}: both splits need the same "
                     "classes (labels are their positions in name order)",
                     c, valDir, trainDir);
  }
}

TrainingData openInMemory(const DataOptions& o, Dataset train, Dataset test) {
  const bool handedIn = train.size() > 0;
  if (!handedIn) {
    if (o.dataset == "synthetic") {
      const auto& shape = o.syntheticShape;
      train = makeSyntheticDataset(std::max<int64_t>(o.trainSamples, 1024), shape[0], shape[1],
                                   shape[2], o.syntheticClasses, o.seed);
      test = makeSyntheticDataset(std::max<int64_t>(o.evalSamples, 1024), shape[0], shape[1],
                                  shape[2], o.syntheticClasses, o.seed + 1);
    } else {
      // Only the samples the run uses are decompressed (0.4 s saved per
      // start on a subset).
      train = loadFashionMnist(o.path, "train", o.trainSamples);
      test = loadFashionMnist(o.path, "test", o.evalSamples);
    }
    train = takeFirst(train, o.trainSamples);
    test = takeFirst(test, o.evalSamples);
  }
  BIGBATCH_REQUIRE(test.size() > 0, InvalidArgument, "the test set is empty");
  BIGBATCH_REQUIRE(o.imageSize == 0 || o.imageSize == train.images.size(2), InvalidArgument,
                   "model.image_size = {}: {} images are {}x{}; leave it 0 (the data's own "
                   "size) or use data.dataset = \"folder\" to resize",
                   o.imageSize, o.dataset, train.images.size(2), train.images.size(3));
  TrainingData d;
  d.train = makeIdxSource(train);
  d.test = makeIdxSource(test);
  d.trainAugment.flip = o.flip;
  d.trainAugment.padCrop = o.padCrop;
  d.trainAugment.mean = d.evalAugment.mean = {train.mean};
  d.trainAugment.std = d.evalAugment.std = {train.std};
  d.channels = train.images.size(1);
  d.numClasses = train.numClasses;
  d.imageSize = train.images.size(2);
  d.description = fmt::format("{}: {} train, {} test", handedIn ? train.name : o.dataset,
                              train.size(), test.size());
  d.trainSet = std::move(train);
  d.testSet = std::move(test);
  return d;
}

TrainingData openCifar10(const DataOptions& o) {
  BIGBATCH_REQUIRE(!o.path.empty(), InvalidArgument,
                   "data.dataset = \"cifar10\" needs data.path: the folder with "
                   "data_batch_1.bin .. data_batch_5.bin and test_batch.bin (the CIFAR-10 binary "
                   "version)");
  BIGBATCH_REQUIRE(o.imageSize == 0 || o.imageSize == 32, InvalidArgument,
                   "model.image_size = {}: CIFAR-10 images are 32x32; leave it 0", o.imageSize);
  TrainingData d;
  d.train = subset(makeCifar10Source(o.path, "train"), o.trainSamples);
  d.test = subset(makeCifar10Source(o.path, "test"), o.evalSamples);
  d.trainAugment.flip = o.flip;
  d.trainAugment.padCrop = o.padCrop;
  d.trainAugment.mean = d.evalAugment.mean = kCifarMean;
  d.trainAugment.std = d.evalAugment.std = kCifarStd;
  d.channels = 3;
  d.numClasses = 10;
  d.imageSize = 32;
  d.description =
      fmt::format("cifar10 ({}): {} train, {} test", o.path, d.train->size(), d.test->size());
  return d;
}

TrainingData openFolder(const DataOptions& o) {
  std::string trainDir, valDir;
  resolveFolders(o, trainDir, valDir);
  BIGBATCH_REQUIRE(
      o.cropScale.size() == 2 && 0 < o.cropScale[0] && o.cropScale[0] <= o.cropScale[1] &&
          o.cropScale[1] <= 1,
      InvalidArgument,
      "data.crop_scale must be [min, max] with 0 < min <= max <= 1 (e.g. [0.08, 1.0])");
  BIGBATCH_REQUIRE(
      o.cropRatio.size() == 2 && 0 < o.cropRatio[0] && o.cropRatio[0] <= o.cropRatio[1],
      InvalidArgument,
      "data.crop_ratio must be [min, max] with 0 < min <= max (e.g. [0.75, 1.3333])");
  TrainingData d;
  d.train = subset(makeImageFolderSource(trainDir), o.trainSamples);
  d.test = subset(makeImageFolderSource(valDir), o.evalSamples);
  d.imageSize = o.imageSize > 0 ? o.imageSize : 224;
  ImageAugment& t = d.trainAugment;
  t.outHeight = t.outWidth = d.imageSize;
  t.randomResizedCrop = o.randomResizedCrop;
  t.scaleMin = o.cropScale[0];
  t.scaleMax = o.cropScale[1];
  t.ratioMin = o.cropRatio[0];
  t.ratioMax = o.cropRatio[1];
  t.flip = o.flip;
  t.padCrop = o.padCrop;
  ImageAugment& e = d.evalAugment;
  e.outHeight = e.outWidth = d.imageSize;
  e.centerCrop = o.evalCrop;
  t.mean = e.mean = kImageNetMean;
  t.std = e.std = kImageNetStd;
  d.channels = 3;
  d.numClasses = d.train->numClasses();
  d.description =
      fmt::format("folder ({} and {}): {} train, {} val, {} classes, {}x{}", trainDir, valDir,
                  d.train->size(), d.test->size(), d.numClasses, d.imageSize, d.imageSize);
  return d;
}

}  // namespace

void checkDataOptions(const DataOptions& o) {
  BIGBATCH_REQUIRE(o.syntheticShape.size() == 3 && o.syntheticShape[0] >= 1 &&
                       o.syntheticShape[1] >= 1 && o.syntheticShape[2] >= 1,
                   InvalidArgument,
                   "data.synthetic_shape must be [channels, height, width], each >= 1 (e.g. "
                   "[3, 224, 224])");
}

void checkDecodeChoice(const DataOptions& o, const std::string& device) {
  if (o.decode != "gpu") return;
  BIGBATCH_REQUIRE(o.dataset == "folder", InvalidArgument,
                   "data.decode = \"gpu\" decodes folders of JPEG files, but data.dataset = "
                   "\"{}\"; set data.dataset = \"folder\" or data.decode = \"cpu\"",
                   o.dataset);
  BIGBATCH_REQUIRE(o.padCrop == 0, InvalidArgument,
                   "data.decode = \"gpu\" has no pad-crop (data.pad_crop = {}); set "
                   "data.pad_crop = 0 or data.decode = \"cpu\"",
                   o.padCrop);
  const GpuDecodeSupport support = gpuJpegDecodeSupport();
  BIGBATCH_REQUIRE(support.built, InvalidArgument, "data.decode = \"gpu\" needs {}; {}",
                   support.missing, support.fix);
  BIGBATCH_REQUIRE(device == "cuda", InvalidArgument,
                   "data.decode = \"gpu\" decodes on the training GPU, but run.device = \"{}\"; "
                   "set run.device = \"cuda\" or data.decode = \"cpu\"",
                   device);
}

DataOptions dataOptionsFor(const Config& c) {
  DataOptions o = bindRecipeKeys(c).data;  // data.*, model.image_size, run.seed
  checkDataOptions(o);
  return o;
}

TrainingData openTrainingData(const DataOptions& o, Dataset jobTrain, Dataset jobTest) {
  TrainingData d;
  if (jobTrain.size() || o.dataset == "fashion-mnist" || o.dataset == "synthetic") {
    d = openInMemory(o, std::move(jobTrain), std::move(jobTest));
  } else if (o.dataset == "cifar10") {
    d = openCifar10(o);
  } else if (o.dataset == "folder") {
    d = openFolder(o);
  } else {
    BIGBATCH_THROW(InvalidArgument,
                   "data.dataset '{}': choose fashion-mnist, cifar10, folder or synthetic",
                   o.dataset);
  }
  BIGBATCH_REQUIRE(d.train->size() > 0, IoError, "the training set is empty ({})", d.description);
  BIGBATCH_REQUIRE(d.test->size() > 0, IoError, "the test set is empty ({})", d.description);
  return d;
}

ImageShape imageShapeOf(const TrainingData& d) {
  if (d.inMemory()) {
    const auto& images = d.trainSet.images;  // [N, C, H, W]
    return ImageShape{images.size(1), images.size(2), images.size(3), d.numClasses};
  }
  return ImageShape{d.channels, d.imageSize, d.imageSize, d.numClasses};
}

ImageShape checkTrainingDataOpens(const DataOptions& o) {
  if (o.dataset == "fashion-mnist") {
    const Dataset first = loadFashionMnist(o.path, "train", 1);
    loadFashionMnist(o.path, "test", 1);
    const auto& images = first.images;
    return ImageShape{images.size(1), images.size(2), images.size(3), first.numClasses};
  }
  if (o.dataset == "cifar10") {
    openCifar10(o);
    return ImageShape{3, 32, 32, 10};
  }
  if (o.dataset == "folder") {
    std::string trainDir, valDir;
    resolveFolders(o, trainDir, valDir);
    int64_t classes = 0;  // the class folders, as the image source counts them
    for (const auto& e : std::filesystem::directory_iterator(trainDir)) classes += e.is_directory();
    const int64_t side = o.imageSize > 0 ? o.imageSize : 224;
    return ImageShape{3, side, side, classes};
  }
  const auto& shape = o.syntheticShape;
  return ImageShape{shape[0], shape[1], shape[2], o.syntheticClasses};
}

}  // namespace bigbatch::train_detail
