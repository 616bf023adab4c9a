// MLPerf-style `:::MLLOG {json}` lines, in the exact format of the MLCommons
// logging library (mlperf_logging.mllog): keys in the order namespace,
// time_ms, event_type, key, value, metadata; JSON with ", " and ": "
// separators as Python's json.dumps writes them.
//
// All MLPerf lines go through one MlperfLogger and nowhere else. Thread-safe
// (one mutex around each line). Only rank 0 writes; other ranks' loggers are
// disabled.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

namespace bigbatch {

enum class MllogEvent { kPointInTime, kIntervalStart, kIntervalEnd };

// The key names of the MLPerf training rules (mlperf_logging.mllog.constants).
namespace mlkey {
inline constexpr const char* kCacheClear = "cache_clear";
inline constexpr const char* kInitStart = "init_start";
inline constexpr const char* kInitStop = "init_stop";
inline constexpr const char* kRunStart = "run_start";
inline constexpr const char* kRunStop = "run_stop";
inline constexpr const char* kEpochStart = "epoch_start";
inline constexpr const char* kEpochStop = "epoch_stop";
inline constexpr const char* kBlockStart = "block_start";
inline constexpr const char* kBlockStop = "block_stop";
inline constexpr const char* kEvalStart = "eval_start";
inline constexpr const char* kEvalStop = "eval_stop";
inline constexpr const char* kEvalAccuracy = "eval_accuracy";
inline constexpr const char* kGlobalBatchSize = "global_batch_size";
inline constexpr const char* kGradientAccumulationSteps = "gradient_accumulation_steps";
inline constexpr const char* kTrainSamples = "train_samples";
inline constexpr const char* kEvalSamples = "eval_samples";
inline constexpr const char* kOptName = "opt_name";
inline constexpr const char* kSeed = "seed";
inline constexpr const char* kSubmissionBenchmark = "submission_benchmark";
inline constexpr const char* kSubmissionDivision = "submission_division";
inline constexpr const char* kSubmissionOrg = "submission_org";
inline constexpr const char* kSubmissionPlatform = "submission_platform";
inline constexpr const char* kSubmissionStatus = "submission_status";
}  // namespace mlkey

// Serialises JSON the way Python's json.dumps does by default.
std::string pythonJsonDump(const nlohmann::ordered_json& value);

class MlperfLogger {
 public:
  MlperfLogger() = default;
  ~MlperfLogger();
  MlperfLogger(const MlperfLogger&) = delete;
  MlperfLogger& operator=(const MlperfLogger&) = delete;

  // Appends lines to `path` (and, if `echo`, to stdout). Empty path: no file.
  void open(const std::string& path, bool echo);
  void close();
  bool enabled() const { return file_ != nullptr || echo_; }

  // Writes one line; `file`/`line` become metadata.file and metadata.lineno.
  void log(MllogEvent event, const std::string& key, const nlohmann::ordered_json& value,
           nlohmann::ordered_json metadata, const char* file, int line);

  // Formats a line without writing it (used by log() and by tests).
  static std::string format(int64_t timeMs, MllogEvent event, const std::string& key,
                            const nlohmann::ordered_json& value,
                            const nlohmann::ordered_json& metadata);

 private:
  std::mutex mutex_;
  std::FILE* file_ = nullptr;  // guarded by mutex_
  bool echo_ = false;
};

}  // namespace bigbatch

// Call-site helpers: record this file and line in metadata, as mllog does.
#define BIGBATCH_MLLOG_EVENT(logger, event, key, value, metadata) \
  (logger).log(event, key, value, metadata, __FILE__, __LINE__)
#define BIGBATCH_MLLOG_POINT(logger, key, value, ...)                                  \
  (logger).log(::bigbatch::MllogEvent::kPointInTime, key, value,                      \
               nlohmann::ordered_json(__VA_ARGS__), __FILE__, __LINE__)
#define BIGBATCH_MLLOG_START(logger, key, ...)                                        \
  (logger).log(::bigbatch::MllogEvent::kIntervalStart, key, nullptr,                  \
               nlohmann::ordered_json(__VA_ARGS__), __FILE__, __LINE__)
#define BIGBATCH_MLLOG_END(logger, key, ...)                                          \
  (logger).log(::bigbatch::MllogEvent::kIntervalEnd, key, nullptr,                    \
               nlohmann::ordered_json(__VA_ARGS__), __FILE__, __LINE__)
