#include "bigbatch/train/run_dir.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <filesystem>

#include "bigbatch/common/error.h"
#include "bigbatch/common/supervision_env.h"

namespace bigbatch {
namespace fs = std::filesystem;

RunDir::RunDir(std::string path, bool overwrite, int64_t resumeEpoch) : path_(std::move(path)) {
  std::error_code ec;
  if (resumeEpoch > 0) {
    fs::create_directories(path_, ec);
    if (ec) BIGBATCH_THROW(IoError, "cannot create run directory '{}': {}", path_, ec.message());
    // Keep the metrics of the epochs before the checkpoint.
    std::ifstream in(file("metrics.csv"));
    std::string header, line, kept;
    if (std::getline(in, header)) {
      while (std::getline(in, line)) {
        const int64_t epoch = std::atoll(line.substr(0, line.find(',')).c_str());
        if (epoch >= 1 && epoch < resumeEpoch) kept += line + "\n";
      }
      in.close();
      writeText("metrics.csv", header + "\n" + kept);
      metrics_.open(file("metrics.csv"), std::ios::app);
      if (!metrics_) BIGBATCH_THROW(IoError, "cannot append to '{}'", file("metrics.csv"));
    }
    if (fs::exists(file("mlperf.log"))) {
      int n = 1;
      while (fs::exists(file(fmt::format("mlperf.log.{}", n)))) ++n;
      fs::rename(file("mlperf.log"), file(fmt::format("mlperf.log.{}", n)), ec);
    }
    fs::remove(file("summary.json"), ec);
    return;
  }
  if (!overwrite) refuseExistingRun(path_);
  fs::create_directories(path_, ec);
  if (ec) {
    BIGBATCH_THROW(IoError, "cannot create run directory '{}': {}", path_, ec.message());
  }
  removeEarlierRun();
}

void RunDir::removeEarlierRun() const {
  // A restart of bigbatch's supervisor: the attempts' record is its own.
  const char* restart = std::getenv(kRestartCountEnv);
  const bool supervisedRestart = restart != nullptr && std::atoi(restart) > 0;
  std::error_code ec;
  for (const char* f : {"summary.json", "mlperf.log", "metrics.csv", "model.pt", "model.jit.pt",
                        "config.toml"}) {
    fs::remove(file(f), ec);
  }
  // A restart's train.log goes on where the failed attempt's stopped.
  if (supervisedRestart) return;
  fs::remove(file("train.log"), ec);
  fs::remove(file("restarts.json"), ec);
  for (const auto& e : fs::directory_iterator(path_, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("mlperf.log.", 0) == 0) fs::remove(e.path(), ec);
  }
}

void RunDir::refuseExistingRun(const std::string& path) {
  for (const char* f : {"summary.json", "mlperf.log", "metrics.csv"}) {
    if (fs::exists(fs::path(path) / f)) {
      BIGBATCH_THROW(InvalidArgument,
                     "run directory '{}' already holds a run ({} exists); choose another "
                     "--run-dir, or pass --overwrite to replace it",
                     path, f);
    }
  }
}

std::string RunDir::file(const std::string& name) const { return (fs::path(path_) / name).string(); }

void RunDir::writeText(const std::string& name, const std::string& text) const {
  const std::string tmp = file(name + ".tmp");
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out.flush()) BIGBATCH_THROW(IoError, "cannot write '{}'", tmp);
  }
  std::error_code ec;
  fs::rename(tmp, file(name), ec);
  if (ec) BIGBATCH_THROW(IoError, "cannot rename '{}' to '{}': {}", tmp, file(name), ec.message());
}

void RunDir::writeJson(const std::string& name, const nlohmann::ordered_json& value) const {
  writeText(name, value.dump(2) + "\n");
}

void RunDir::appendMetrics(const std::vector<std::string>& columns,
                           const std::vector<std::string>& values) {
  if (!metrics_.is_open()) {
    metrics_.open(file("metrics.csv"), std::ios::trunc);
    if (!metrics_) BIGBATCH_THROW(IoError, "cannot write '{}'", file("metrics.csv"));
    metrics_ << fmt::format("{}\n", fmt::join(columns, ","));
  }
  metrics_ << fmt::format("{}\n", fmt::join(values, ","));
  metrics_.flush();
}

}  // namespace bigbatch
