#include "bigbatch/common/mlperf_logger.h"

#include <cerrno>
#include <cstring>

#include "bigbatch/common/error.h"

namespace bigbatch {

std::string pythonJsonDump(const nlohmann::ordered_json& value) {
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : value.items()) {
      if (!first) out += ", ";
      first = false;
      out += nlohmann::ordered_json(k).dump() + ": " + pythonJsonDump(v);
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) {
      if (i) out += ", ";
      out += pythonJsonDump(value[i]);
    }
    return out + "]";
  }
  // Python writes non-ASCII as \uXXXX (ensure_ascii=True); nlohmann can too.
  return value.dump(-1, ' ', /*ensure_ascii=*/true);
}

MlperfLogger::~MlperfLogger() { close(); }

void MlperfLogger::open(const std::string& path, bool echo) {
  std::lock_guard<std::mutex> lock(mutex_);
  echo_ = echo;
  if (!path.empty()) {
    file_ = std::fopen(path.c_str(), "a");
    if (!file_) {
      BIGBATCH_THROW(IoError, "cannot open MLPerf log '{}' for writing: {}", path,
                     std::strerror(errno));
    }
  }
}

void MlperfLogger::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_) std::fclose(file_);
  file_ = nullptr;
  echo_ = false;
}

std::string MlperfLogger::format(int64_t timeMs, MllogEvent event, const std::string& key,
                                 const nlohmann::ordered_json& value,
                                 const nlohmann::ordered_json& metadata) {
  const char* type = event == MllogEvent::kPointInTime     ? "POINT_IN_TIME"
                     : event == MllogEvent::kIntervalStart ? "INTERVAL_START"
                                                           : "INTERVAL_END";
  nlohmann::ordered_json line;
  line["namespace"] = "";
  line["time_ms"] = timeMs;
  line["event_type"] = type;
  line["key"] = key;
  line["value"] = value;
  line["metadata"] = metadata;
  return ":::MLLOG " + pythonJsonDump(line);
}

void MlperfLogger::log(MllogEvent event, const std::string& key,
                       const nlohmann::ordered_json& value, nlohmann::ordered_json metadata,
                       const char* file, int line) {
  if (!enabled()) return;
  const int64_t nowMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  if (metadata.is_null()) metadata = nlohmann::ordered_json::object();
  // mllog puts file and lineno first in metadata, then the caller's entries.
  nlohmann::ordered_json meta;
  // Paths relative to the source tree, as mllog's root_dir trimming gives.
  std::string path = file;
  for (const char* top : {"/src/", "/apps/", "/examples/", "/bench/", "/tests/"}) {
    auto pos = path.rfind(top);
    if (pos != std::string::npos) {
      path = path.substr(pos + 1);
      break;
    }
  }
  meta["file"] = path;
  meta["lineno"] = line;
  for (const auto& [k, v] : metadata.items()) meta[k] = v;
  std::string text = format(nowMs, event, key, value, meta) + "\n";
  std::lock_guard<std::mutex> lock(mutex_);
  if (file_) {
    std::fputs(text.c_str(), file_);
    std::fflush(file_);
  }
  if (echo_) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  }
}

}  // namespace bigbatch
