// Labelled image collections read by index — the first stages of the input
// pipeline (input_pipeline.h): `read` fetches a sample's stored bytes (a file,
// a record of a binary batch, a slice of memory) and `decode` turns them into
// an 8-bit HWC image. Sources:
//   IDX      Fashion-MNIST / MNIST tensors in memory (Dataset)
//   CIFAR-10 the binary batches (data_batch_1..5.bin, test_batch.bin)
//   folder   ImageNet-style class folders of JPEGs, root/<class>/<file>.jpg,
//            classes sorted by name, decoded with libturbojpeg
//   synthetic deterministic random images, for throughput benchmarks
//
// A JPEG is decoded at the smallest DCT scale (M/8, libjpeg-turbo's scaled
// IDCT) that still gives the pipeline at least `minWidth` x `minHeight` pixels
// for the region it will crop — when the crop is much larger than the output
// size this skips most of the IDCT work.
//
// Threading: every method is const and thread-safe (the pipeline's workers
// call read and decode concurrently).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/data/dataset.h"

namespace bigbatch {

// 8-bit pixels, height x width x channels, row-major (HWC).
struct Image {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  std::vector<uint8_t> pixels;
  size_t bytes() const { return pixels.size(); }
};

struct ImageSize {
  int64_t height = 0;
  int64_t width = 0;
};

// A decoded image and the size of the original it came from (they differ
// when the decode was DCT-scaled).
struct DecodedImage {
  ImageSize original;
  Image image;
};

// What the pipeline needs from a decode: at least this many pixels across
// the region of the original image it will use (0: full resolution).
struct DecodeRequest {
  double regionHeight = 0;  // in original pixels
  double regionWidth = 0;
  int64_t minHeight = 0;    // pixels the region must still have after scaling
  int64_t minWidth = 0;
};

class ImageSource {
 public:
  virtual ~ImageSource() = default;
  virtual std::string kind() const = 0;  // "idx", "cifar10", "folder", "synthetic"
  virtual int64_t size() const = 0;
  virtual int64_t numClasses() const = 0;
  virtual int64_t channels() const = 0;
  virtual int64_t label(int64_t i) const = 0;
  // The size every image has, or {0, 0} when they vary (JPEG folders).
  virtual ImageSize fixedSize() const = 0;
  // Where sample i comes from, for messages: a path, or a file and record.
  virtual std::string where(int64_t i) const = 0;
  // Its stored bytes; throws IoError when they cannot be read.
  virtual void read(int64_t i, std::vector<uint8_t>& bytes) const = 0;
  // The full-resolution size from the stored bytes (a JPEG header; no
  // decode); throws IoError on malformed data.
  virtual ImageSize peek(const std::vector<uint8_t>& bytes) const = 0;
  // Decodes; the result may be smaller than peek() by a DCT scale that keeps
  // `request` satisfied. Throws IoError on corrupt or truncated data.
  virtual Image decode(const std::vector<uint8_t>& bytes, const DecodeRequest& request) const = 0;
};

// Images and labels already in memory (loadFashionMnist, makeSyntheticDataset).
std::shared_ptr<ImageSource> makeIdxSource(Dataset data);

// CIFAR-10 binary version in `dir`: split "train" (data_batch_1..5.bin) or
// "test" (test_batch.bin); each record is 1 label byte + 3072 bytes (R, G, B
// planes of 32 x 32). Throws IoError naming a missing or mis-sized file.
std::shared_ptr<ImageSource> makeCifar10Source(const std::string& dir, const std::string& split);

// root/<class>/<file>.{jpg,jpeg,JPG,JPEG}; classes are the sub-folders sorted
// by name (label = position), files sorted within a class; other files are
// ignored. An empty class folder keeps its label (a warning is logged);
// no images at all is an IoError. Decodes to 3-channel RGB.
std::shared_ptr<ImageSource> makeImageFolderSource(const std::string& root);

// n random images of channels x height x width, label i mod numClasses, each a
// function of (seed, i) only.
std::shared_ptr<ImageSource> makeSyntheticSource(int64_t n, int64_t channels, int64_t height,
                                                 int64_t width, int64_t numClasses, uint64_t seed);

// JPEG encoding (libturbojpeg) of an HWC image with 1 or 3 channels, for
// tests and the benchmark's generated folders.
std::vector<uint8_t> encodeJpeg(const Image& image, int quality);

}  // namespace bigbatch
