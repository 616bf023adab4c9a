#include "bigbatch/data/image_source.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"
#include "bigbatch/data/sampler.h"
#include "jpeg_codec.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

// Raw HWC bytes of a known size: "decoding" is a copy.
Image rawImage(const std::vector<uint8_t>& bytes, int64_t h, int64_t w, int64_t c,
               const std::string& what) {
  BIGBATCH_REQUIRE(static_cast<int64_t>(bytes.size()) == h * w * c, IoError,
                   "{}: {} bytes for a {}x{}x{} image", what, bytes.size(), h, w, c);
  return Image{h, w, c, bytes};
}

// --- IDX (in memory) --------------------------------------------------------

class IdxSource final : public ImageSource {
 public:
  explicit IdxSource(Dataset d) : d_(std::move(d)) {
    BIGBATCH_REQUIRE(
        d_.images.defined() && d_.images.dim() == 4 && d_.images.scalar_type() == torch::kUInt8,
        InvalidArgument, "IDX source: images must be uint8 [N, C, H, W]");
    d_.images = d_.images.contiguous();
    d_.labels = d_.labels.contiguous();
    c_ = d_.images.size(1);
    h_ = d_.images.size(2);
    w_ = d_.images.size(3);
  }
  std::string kind() const override { return "idx"; }
  int64_t size() const override { return d_.size(); }
  int64_t numClasses() const override { return d_.numClasses; }
  int64_t channels() const override { return c_; }
  int64_t label(int64_t i) const override { return d_.labels.data_ptr<int64_t>()[i]; }
  ImageSize fixedSize() const override { return {h_, w_}; }
  std::string where(int64_t i) const override { return fmt::format("{}[{}]", d_.name, i); }
  void read(int64_t i, std::vector<uint8_t>& bytes) const override {
    // CHW in memory -> HWC bytes: a copy for one channel, else each pixel's
    // channels gathered from the planes (locals, not members: a byte store
    // may alias them, which would reload them every element).
    const int64_t c = c_, hw = h_ * w_;
    const uint8_t* src = d_.images.data_ptr<uint8_t>() + i * c * hw;
    bytes.resize(static_cast<size_t>(c * hw));
    uint8_t* dst = bytes.data();
    if (c == 1) {
      std::memcpy(dst, src, static_cast<size_t>(hw));
      return;
    }
    if (c == 3) {  // RGB: three planes interleaved, which the compiler vectorises
      const uint8_t *r = src, *g = src + hw, *b = src + 2 * hw;
      for (int64_t p = 0; p < hw; ++p) {
        dst[3 * p] = r[p];
        dst[3 * p + 1] = g[p];
        dst[3 * p + 2] = b[p];
      }
      return;
    }
    for (int64_t p = 0; p < hw; ++p) {
      for (int64_t ch = 0; ch < c; ++ch) dst[p * c + ch] = src[ch * hw + p];
    }
  }
  ImageSize peek(const std::vector<uint8_t>&) const override { return {h_, w_}; }
  Image decode(const std::vector<uint8_t>& bytes, const DecodeRequest&) const override {
    return rawImage(bytes, h_, w_, c_, d_.name);
  }

 private:
  Dataset d_;
  int64_t c_, h_, w_;
};

// --- CIFAR-10 binary batches (memory-mapped) --------------------------------

class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    BIGBATCH_REQUIRE(fd >= 0, IoError, "cannot open {}: {}", path, std::strerror(errno));
    struct stat st {};
    ::fstat(fd, &st);
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      ::close(fd);
      BIGBATCH_REQUIRE(p != MAP_FAILED, IoError, "cannot map {}: {}", path, std::strerror(errno));
      data_ = static_cast<const uint8_t*>(p);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class Cifar10Source final : public ImageSource {
 public:
  static constexpr int64_t kRecord = 1 + 3 * 32 * 32;

  Cifar10Source(const std::string& dir, const std::string& split) {
    std::vector<std::string> names;
    if (split == "train") {
      for (int i = 1; i <= 5; ++i) names.push_back(fmt::format("data_batch_{}.bin", i));
    } else if (split == "test") {
      names.push_back("test_batch.bin");
    } else {
      BIGBATCH_THROW(InvalidArgument, "CIFAR-10 split '{}' is not train or test", split);
    }
    for (const auto& n : names) {
      const std::string path = (fs::path(dir) / n).string();
      BIGBATCH_REQUIRE(fs::exists(path), IoError,
                       "CIFAR-10: {} is missing (expected the binary version's {} in {})", path,
                       fmt::join(names, ", "), dir);
      auto f = std::make_unique<MappedFile>(path);
      BIGBATCH_REQUIRE(f->size() > 0 && f->size() % kRecord == 0, IoError,
                       "CIFAR-10: {} has {} bytes, not a positive multiple of the {}-byte record "
                       "(truncated or not a CIFAR-10 binary batch)",
                       path, f->size(), kRecord);
      for (int64_t r = 0; r < static_cast<int64_t>(f->size() / kRecord); ++r) {
        const uint8_t label = f->data()[r * kRecord];
        BIGBATCH_REQUIRE(label < 10, IoError, "CIFAR-10: {} record {} has label {} (not 0..9)",
                         path, r, static_cast<int>(label));
        records_.push_back({files_.size(), r});
      }
      files_.push_back(std::move(f));
    }
  }
  std::string kind() const override { return "cifar10"; }
  int64_t size() const override { return static_cast<int64_t>(records_.size()); }
  int64_t numClasses() const override { return 10; }
  int64_t channels() const override { return 3; }
  ImageSize fixedSize() const override { return {32, 32}; }
  int64_t label(int64_t i) const override { return record(i)[0]; }
  std::string where(int64_t i) const override {
    return fmt::format("{} record {}", files_[records_[i].file]->path(), records_[i].record);
  }
  void read(int64_t i, std::vector<uint8_t>& bytes) const override {
    const uint8_t* r = record(i) + 1;
    bytes.assign(r, r + 3 * 32 * 32);
  }
  ImageSize peek(const std::vector<uint8_t>&) const override { return {32, 32}; }
  Image decode(const std::vector<uint8_t>& bytes, const DecodeRequest&) const override {
    BIGBATCH_REQUIRE(bytes.size() == 3 * 32 * 32, IoError, "CIFAR-10 record of {} bytes",
                     bytes.size());
    Image img{32, 32, 3, std::vector<uint8_t>(3 * 32 * 32)};
    for (int64_t ch = 0; ch < 3; ++ch) {
      for (int64_t p = 0; p < 32 * 32; ++p) img.pixels[p * 3 + ch] = bytes[ch * 32 * 32 + p];
    }
    return img;
  }

 private:
  struct Ref {
    size_t file;
    int64_t record;
  };
  const uint8_t* record(int64_t i) const {
    return files_[records_[i].file]->data() + records_[i].record * kRecord;
  }
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<Ref> records_;
};

// --- class folders of JPEGs --------------------------------------------------

bool isJpegName(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg";
}

class ImageFolderSource final : public ImageSource {
 public:
  explicit ImageFolderSource(const std::string& root) {
    BIGBATCH_REQUIRE(fs::is_directory(root), IoError,
                     "image folder {} does not exist or is not a directory (expected "
                     "root/<class>/<image>.jpg)",
                     root);
    std::vector<fs::path> classes;
    for (const auto& e : fs::directory_iterator(root)) {
      if (e.is_directory()) classes.push_back(e.path());
    }
    std::sort(classes.begin(), classes.end());
    BIGBATCH_REQUIRE(!classes.empty(), IoError,
                     "image folder {} has no class sub-folders (expected root/<class>/<image>.jpg)",
                     root);
    for (size_t c = 0; c < classes.size(); ++c) {
      std::vector<std::string> files;
      for (const auto& e : fs::directory_iterator(classes[c])) {
        if (e.is_regular_file() && isJpegName(e.path())) files.push_back(e.path().string());
      }
      std::sort(files.begin(), files.end());
      if (files.empty()) {
        log().warn("image folder: class {} ('{}') has no .jpg/.jpeg files; its label is kept",
                   c, classes[c].filename().string());
      }
      for (auto& f : files) {
        paths_.push_back(std::move(f));
        labels_.push_back(static_cast<int64_t>(c));
      }
    }
    classes_ = static_cast<int64_t>(classes.size());
    BIGBATCH_REQUIRE(!paths_.empty(), IoError,
                     "image folder {}: no .jpg/.jpeg files in any of its {} "
                     "class folders",
                     root, classes.size());
  }
  std::string kind() const override { return "folder"; }
  int64_t size() const override { return static_cast<int64_t>(paths_.size()); }
  int64_t numClasses() const override { return classes_; }
  int64_t channels() const override { return 3; }
  ImageSize fixedSize() const override { return {}; }
  int64_t label(int64_t i) const override { return labels_[i]; }
  std::string where(int64_t i) const override { return paths_[i]; }
  void read(int64_t i, std::vector<uint8_t>& bytes) const override {
    std::ifstream in(paths_[i], std::ios::binary | std::ios::ate);
    BIGBATCH_REQUIRE(in.good(), IoError, "cannot read {}: {}", paths_[i], std::strerror(errno));
    const std::streamsize n = in.tellg();
    in.seekg(0);
    bytes.resize(static_cast<size_t>(std::max<std::streamsize>(n, 0)));
    BIGBATCH_REQUIRE(in.read(reinterpret_cast<char*>(bytes.data()), n) || n == 0, IoError,
                     "cannot read {}: {}", paths_[i], std::strerror(errno));
  }
  ImageSize peek(const std::vector<uint8_t>& bytes) const override {
    return data_detail::jpegSize(bytes.data(), bytes.size());
  }
  Image decode(const std::vector<uint8_t>& bytes, const DecodeRequest& request) const override {
    return data_detail::decodeJpeg(bytes.data(), bytes.size(), request);
  }

 private:
  std::vector<std::string> paths_;
  std::vector<int64_t> labels_;
  int64_t classes_ = 0;
};

// --- synthetic ---------------------------------------------------------------

class SyntheticSource final : public ImageSource {
 public:
  SyntheticSource(int64_t n, int64_t c, int64_t h, int64_t w, int64_t classes, uint64_t seed)
      : n_(n), c_(c), h_(h), w_(w), classes_(classes), seed_(seed) {
    BIGBATCH_REQUIRE(n > 0 && c > 0 && h > 0 && w > 0 && classes > 0, InvalidArgument,
                     "synthetic source: sizes must be positive (n {}, {}x{}x{}, {} classes)", n, c,
                     h, w, classes);
  }
  std::string kind() const override { return "synthetic"; }
  int64_t size() const override { return n_; }
  int64_t numClasses() const override { return classes_; }
  int64_t channels() const override { return c_; }
  ImageSize fixedSize() const override { return {h_, w_}; }
  int64_t label(int64_t i) const override { return i % classes_; }
  std::string where(int64_t i) const override { return fmt::format("synthetic[{}]", i); }
  void read(int64_t i, std::vector<uint8_t>& bytes) const override {
    bytes.resize(static_cast<size_t>(c_ * h_ * w_));
    uint64_t r = mixSeed(seed_, static_cast<uint64_t>(i));
    for (size_t k = 0; k < bytes.size(); k += 8) {
      r = splitmix64(r);
      for (size_t b = 0; b < 8 && k + b < bytes.size(); ++b) bytes[k + b] = static_cast<uint8_t>(r >> (8 * b));
    }
  }
  ImageSize peek(const std::vector<uint8_t>&) const override { return {h_, w_}; }
  Image decode(const std::vector<uint8_t>& bytes, const DecodeRequest&) const override {
    return rawImage(bytes, h_, w_, c_, "synthetic");
  }

 private:
  int64_t n_, c_, h_, w_, classes_;
  uint64_t seed_;
};

}  // namespace

std::shared_ptr<ImageSource> makeIdxSource(Dataset data) {
  return std::make_shared<IdxSource>(std::move(data));
}
std::shared_ptr<ImageSource> makeCifar10Source(const std::string& dir, const std::string& split) {
  return std::make_shared<Cifar10Source>(dir, split);
}
std::shared_ptr<ImageSource> makeImageFolderSource(const std::string& root) {
  return std::make_shared<ImageFolderSource>(root);
}
std::shared_ptr<ImageSource> makeSyntheticSource(int64_t n, int64_t channels, int64_t height,
                                                 int64_t width, int64_t numClasses, uint64_t seed) {
  return std::make_shared<SyntheticSource>(n, channels, height, width, numClasses, seed);
}
std::vector<uint8_t> encodeJpeg(const Image& image, int quality) {
  return data_detail::encodeJpegImage(image, quality);
}

}  // namespace bigbatch
