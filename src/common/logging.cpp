#include "bigbatch/common/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/dist_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>
#include <mutex>

namespace bigbatch {
namespace {

// The logger never changes its own sink list — spdlog reads that vector
// unlocked on every message, so resizing it while another thread logs is a
// data race. Its one sink is a dist_sink, whose children (the console, a
// run's train.log) are swapped under the lock that every message takes.
struct Logging {
  std::shared_ptr<spdlog::sinks::dist_sink_mt> sinks =
      std::make_shared<spdlog::sinks::dist_sink_mt>();
  std::shared_ptr<spdlog::sinks::sink> console =
      std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  std::shared_ptr<spdlog::logger> logger;
  std::mutex setup;  // initLogging and addLogFile: one at a time

  Logging() {
    console->set_pattern("[%H:%M:%S.%e] [rank 0] [%^%l%$] %v");
    sinks->set_sinks({console});
    logger = std::make_shared<spdlog::logger>("bigbatch", sinks);
  }
};

Logging& logging() {
  static Logging l;
  return l;
}

}  // namespace

void initLogging(int rank, Verbosity verbosity) {
  Logging& l = logging();
  const std::lock_guard<std::mutex> lock(l.setup);
  spdlog::level::level_enum level = spdlog::level::info;
  if (verbosity == Verbosity::kVerbose) level = spdlog::level::debug;
  if (verbosity == Verbosity::kQuiet || rank != 0) level = spdlog::level::warn;
  // The console's level is its sink's; the logger passes what a log file
  // (addLogFile) wants too. A log file of an earlier run goes.
  l.console->set_pattern(fmt::format("[%H:%M:%S.%e] [rank {}] [%^%l%$] %v", rank));
  l.console->set_level(level);
  l.sinks->set_sinks({l.console});
  l.logger->set_level(level);
}

void addLogFile(const std::string& path) {
  Logging& l = logging();
  const std::lock_guard<std::mutex> lock(l.setup);
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  file->set_level(spdlog::level::debug);
  file->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  l.sinks->add_sink(file);
  l.logger->set_level(spdlog::level::debug);
}

spdlog::logger& log() { return *logging().logger; }

}  // namespace bigbatch
