// The directory a training run writes: the resolved config (config.toml),
// mlperf.log, metrics.csv (one row per epoch) and summary.json. Only rank 0
// owns one. Not thread-safe: the trainer thread writes it.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace bigbatch {

class RunDir {
 public:
  // Creates `path` (and parents). Refuses a directory that already holds a
  // run (summary.json or mlperf.log) unless `overwrite`, so nothing is lost.
  // `overwrite` removes every file the earlier run wrote there (its
  // summary, logs, metrics, model.pt and model.jit.pt, restarts.json), so
  // nothing of it is taken for the new run's — only a supervisor's restart
  // (BIGBATCH_RESTART_COUNT > 0) keeps that supervisor's own record of the
  // attempts (restarts.json, mlperf.log.<n>) and train.log, which the
  // restart continues.
  // With resumeEpoch > 0 (a resumed run) the directory is reused: rows of
  // metrics.csv from epoch resumeEpoch on are dropped (they will be
  // recomputed), the earlier mlperf.log is kept as mlperf.log.<n>.
  RunDir(std::string path, bool overwrite, int64_t resumeEpoch = 0);

  // The constructor's refusal alone, creating nothing: throws
  // InvalidArgument when `path` already holds a run (a launcher checks this
  // before it starts the ranks).
  static void refuseExistingRun(const std::string& path);

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const;

  void writeText(const std::string& name, const std::string& text) const;
  // Writes JSON atomically (temp file, then rename).
  void writeJson(const std::string& name, const nlohmann::ordered_json& value) const;

  // metrics.csv: the header is written once, then one row per call.
  void appendMetrics(const std::vector<std::string>& columns,
                     const std::vector<std::string>& values);

 private:
  void removeEarlierRun() const;

  std::string path_;
  std::ofstream metrics_;
};

}  // namespace bigbatch
