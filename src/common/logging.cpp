#include "bigbatch/common/logging.h"

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
  l->set_level(level);
}

spdlog::logger& log() { return *loggerSlot(); }

}  // namespace bigbatch
