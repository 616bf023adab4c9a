// `bigbatch data export-folder`: writes Fashion-MNIST's train and test sets
// as an ImageNet-style image folder (ROOT/train/<class>/<n>.jpg and
// ROOT/val/<class>/<n>.jpg), so the trainer's folder path (data.dataset =
// "folder") runs on real images on any machine with the Debian package.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace bigbatch {

struct ExportFolderArgs {
  std::string dataset = "fashion-mnist";
  std::string out;
  std::string path;  // the IDX directory; empty: the Debian package's
  int quality = 95;  // JPEG quality
  bool overwrite = false;
};

CLI::App* addDataCommand(CLI::App& app, ExportFolderArgs& args);
int runExportFolder(const ExportFolderArgs& args);

}  // namespace bigbatch
