#include "data_command.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "bigbatch/common/error.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/image_source.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

// Fashion-MNIST's classes in label order; the two-digit prefix keeps that
// order when the folder source sorts the names.
const char* const kFashionClasses[] = {"00_t-shirt", "01_trouser",   "02_pullover", "03_dress",
                                       "04_coat",    "05_sandal",    "06_shirt",    "07_sneaker",
                                       "08_bag",     "09_ankle-boot"};

void writeSplit(const Dataset& d, const fs::path& dir, int quality) {
  for (const char* name : kFashionClasses) fs::create_directories(dir / name);
  const auto images = d.images.contiguous();
  const int64_t h = images.size(2), w = images.size(3), c = images.size(1);
  const uint8_t* pixels = images.data_ptr<uint8_t>();
  const auto labels = d.labels.contiguous();
  const int64_t* label = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < d.size(); ++i) {
    Image image;
    image.height = h;
    image.width = w;
    image.channels = c;  // 1: grey, stored CHW = HWC
    image.pixels.assign(pixels + i * h * w * c, pixels + (i + 1) * h * w * c);
    const auto bytes = encodeJpeg(image, quality);
    const fs::path file = dir / kFashionClasses[label[i]] / fmt::format("{:05d}.jpg", i);
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    BIGBATCH_REQUIRE(out.good(), IoError, "cannot write {} (disk full? permissions?)",
                     file.string());
  }
}

}  // namespace

CLI::App* addDataCommand(CLI::App& app, ExportFolderArgs& a) {
  auto* data = app.add_subcommand("data", "data sets: export Fashion-MNIST as an image folder");
  data->require_subcommand(1);
  auto* exportFolder = data->add_subcommand(
      "export-folder",
      "write a data set as ROOT/train/<class>/<n>.jpg and ROOT/val/<class>/<n>.jpg, the layout "
      "data.dataset = \"folder\" reads (data.path = ROOT)");
  exportFolder->add_option("dataset", a.dataset, "the data set: fashion-mnist")->required();
  exportFolder->add_option("root", a.out, "the folder to write")->required();
  exportFolder->add_option("--path", a.path,
                           "the IDX directory (default: /usr/share/datasets/fashion-mnist)");
  exportFolder->add_option("--quality", a.quality, "JPEG quality, 1..100")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  exportFolder->add_flag("--overwrite", a.overwrite,
                         "write into a ROOT that already holds train/ or val/ (default: refuse)");
  return exportFolder;
}

int runExportFolder(const ExportFolderArgs& a) {
  BIGBATCH_REQUIRE(a.dataset == "fashion-mnist", InvalidArgument,
                   "data export-folder '{}': only fashion-mnist can be exported (CIFAR-10 and "
                   "folders are read as they are)",
                   a.dataset);
  const fs::path root(a.out);
  BIGBATCH_REQUIRE(a.overwrite || (!fs::exists(root / "train") && !fs::exists(root / "val")),
                   InvalidArgument,
                   "{} already holds train/ or val/; pass --overwrite to write into it, or "
                   "choose another folder",
                   root.string());
  for (const char* split : {"train", "test"}) {
    const Dataset d = loadFashionMnist(a.path, split);
    const fs::path dir = root / (std::string(split) == "train" ? "train" : "val");
    writeSplit(d, dir, a.quality);
    fmt::print("{}: {} images in {} classes (JPEG quality {})\n", dir.string(), d.size(),
               d.numClasses, a.quality);
  }
  return 0;
}

}  // namespace bigbatch
