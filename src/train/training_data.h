// The run's data (data.*): the training and test sources, their
// augmentation, and the image shape and classes the model takes.
//
//   fashion-mnist  the IDX files (data.path, default the Debian package's);
//                  flips and pad-crop as configured; test images as stored
//   synthetic      random 28x28 images (benchmarks, tests)
//   cifar10        the binary version in data.path (data_batch_1..5.bin,
//                  test_batch.bin); pad-crop (data.pad_crop) and flip
//   folder         ImageNet-style class folders of JPEGs: data.train_dir and
//                  data.val_dir, or data.path holding train/ and val/;
//                  random-resized-crop (data.crop_scale, data.crop_ratio) to
//                  model.image_size and flip for training; the centred
//                  data.eval_crop of the shorter side resized to
//                  model.image_size for validation
//
// Fashion-MNIST and synthetic data stay in memory as Datasets (evaluation
// reads them directly, as it always has); CIFAR-10 and folders are read
// through the input pipeline, for validation too. Every problem with the
// data — a missing split, a class folder in train but not in val, an empty
// set — is an error before the first step, naming the path and the fix.
// Internal to src/train; call from one thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bigbatch/common/config.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/image_augment.h"
#include "bigbatch/data/image_source.h"

namespace bigbatch::train_detail {

struct DataOptions {
  std::string dataset = "fashion-mnist";
  std::string path, trainDir, valDir;
  int64_t trainSamples = 0, evalSamples = 0;  // 0: all
  int64_t imageSize = 0;                      // model.image_size; 0: the data's own
  bool flip = true;
  int64_t padCrop = 0;
  bool randomResizedCrop = true;  // folders
  std::vector<double> cropScale = {0.08, 1.0}, cropRatio = {3.0 / 4.0, 4.0 / 3.0};
  double evalCrop = 0.875;
  std::string decode = "cpu";  // data.decode: where folders' JPEGs are decoded, "cpu" or "gpu"
  std::vector<int64_t> syntheticShape = {1, 28, 28};  // channels, height, width
  int64_t syntheticClasses = 10;
  uint64_t seed = 1;
};

DataOptions dataOptionsFor(const Config& c);
// What a single key's range cannot say (data.synthetic_shape's three sides).
void checkDataOptions(const DataOptions& o);
// data.decode = "gpu" where it cannot run, before anything starts: data
// that is not a JPEG folder, pad-crop, a build without CUDA or nvJPEG
// (gpu_jpeg_decoder.h says which), run.device = `device` not "cuda" —
// InvalidArgument naming what is missing and the fix. (No visible GPU is
// run.device's own refusal.)
void checkDecodeChoice(const DataOptions& o, const std::string& device);

struct TrainingData {
  std::shared_ptr<const ImageSource> train, test;
  ImageAugment trainAugment, evalAugment;
  // Fashion-MNIST and synthetic data, in memory; empty for the others.
  Dataset trainSet, testSet;
  int64_t channels = 1, numClasses = 10;
  int64_t imageSize = 0;    // side of the images the model sees
  std::string description;  // for the banner: "cifar10 (/data/cifar): 50000 train, 10000 test"
  bool inMemory() const { return testSet.size() > 0; }
};

// `jobTrain`/`jobTest`: datasets a caller (a test) hands in; when set they
// are used instead of data.dataset.
TrainingData openTrainingData(const DataOptions& o, Dataset jobTrain, Dataset jobTest);

// What the model reads and predicts: images [channels, height, width] of
// `classes` classes.
struct ImageShape {
  int64_t channels = 1, height = 28, width = 28, classes = 10;
};
ImageShape imageShapeOf(const TrainingData& d);

// The cheap part of openTrainingData, for a launcher to run before it
// starts any rank: Fashion-MNIST's four files (headers and first sample),
// CIFAR-10's six (mapped and sized), a folder's two splits and their class
// folders (the images are listed by the ranks). Throws what openTrainingData
// would for them; synthetic data has nothing to check. Returns the shape
// the model will see.
ImageShape checkTrainingDataOpens(const DataOptions& o);

}  // namespace bigbatch::train_detail
