#include "bigbatch/common/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>
#include <mutex>

namespace bigbatch {
namespace {
std::shared_ptr<spdlog::logger>& loggerSlot() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = std::make_shared<spdlog::logger>(
        "bigbatch", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    l->set_pattern("[%H:%M:%S.%e] [rank 0] [%^%l%$] %v");
    return l;
  }();
  return logger;
}
}  // namespace

void initLogging(int rank, Verbosity verbosity) {
  auto& l = loggerSlot();
  l->set_pattern(fmt::format("[%H:%M:%S.%e] [rank {}] [%^%l%$] %v", rank));
  spdlog::level::level_enum level = spdlog::level::info;
  if (verbosity == Verbosity::kVerbose) level = spdlog::level::debug;
  if (verbosity == Verbosity::kQuiet || rank != 0) level = spdlog::level::warn;
  // The console's level is its sink's; the logger passes what a log file
  // (addLogFile) wants too.
  if (l->sinks().size() > 1) l->sinks().resize(1);  // a log file of an earlier run
  l->sinks()[0]->set_level(level);
  l->set_level(level);
}

void addLogFile(const std::string& path) {
  auto& l = loggerSlot();
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  file->set_level(spdlog::level::debug);
  file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  l->sinks().push_back(file);
  l->set_level(spdlog::level::debug);
}

spdlog::logger& log() { return *loggerSlot(); }

}  // namespace bigbatch
