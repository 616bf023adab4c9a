// Levelled logging prefixed with the rank (spdlog underneath).
//
// Only rank 0 speaks to humans by default: other ranks log at warning and
// above. Thread-safe: any thread may log while another calls initLogging or
// addLogFile (the sinks change under the lock each message takes). MLPerf
// lines do not go through here but through MlperfLogger.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace bigbatch {

enum class Verbosity { kQuiet, kNormal, kVerbose };

// Sets the rank prefix and level; call once after the rank is known.
void initLogging(int rank, Verbosity verbosity = Verbosity::kNormal);

// Also writes every message of this process, debug level included, to
// `path` (appended): a run's train.log on rank 0. Call after initLogging
// (which drops it again).
void addLogFile(const std::string& path);

spdlog::logger& log();

}  // namespace bigbatch
