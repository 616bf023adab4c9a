// Whole text files in and out for `bigbatch tune` (the recipe, its
// settings, best.toml and best.json), each failure named with its fix.
//
// Internal to src/tune; plain functions.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "bigbatch/common/error.h"

namespace bigbatch::tune_detail {

inline std::string readText(const std::string& path) {
  std::ifstream in(path);
  BIGBATCH_REQUIRE(in.good(), IoError, "cannot read '{}'; pass an existing TOML recipe", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void writeText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  BIGBATCH_REQUIRE(out.good(), IoError, "cannot write '{}'; check the disk and permissions",
                   path.string());
}

}  // namespace bigbatch::tune_detail
