#include "bigbatch/launch/job_mlperf_log.h"

#include <algorithm>

#include "bigbatch/common/mlperf_logger.h"

namespace bigbatch {
namespace {

bool hasKey(const std::string& line, const char* key) {
  return line.find(std::string("\"key\": \"") + key + "\"") != std::string::npos;
}

// The index of the first line with `key`; lines.size(): none.
size_t find(const std::vector<std::string>& lines, const char* key) {
  return static_cast<size_t>(std::find_if(lines.begin(), lines.end(),
                                          [&](const std::string& l) { return hasKey(l, key); }) -
                             lines.begin());
}

std::string restartLine(const AttemptLog& a, int attempt) {
  nlohmann::ordered_json meta;
  meta["failed_attempt"] = attempt;
  meta["cause"] = a.cause;
  meta["rank"] = a.rank;
  meta["resumed_from_step"] = a.resumedFromStep;
  return MlperfLogger::format(a.endedAtMs, MllogEvent::kPointInTime, "bigbatch_restart",
                              attempt + 1, meta);
}

}  // namespace

std::vector<std::string> joinAttemptLogs(const std::vector<AttemptLog>& attempts) {
  std::vector<std::string> out;
  bool started = false;  // a run_start is in `out`
  for (size_t i = 0; i < attempts.size(); ++i) {
    const AttemptLog& a = attempts[i];
    const size_t runStart = find(a.lines, mlkey::kRunStart);
    // What this attempt adds: all of the first one that started, from its
    // beginning; of a later one, what follows its run_start. An attempt
    // that never reached run_start adds nothing.
    if (runStart < a.lines.size()) {
      const size_t from = started ? runStart + 1 : 0;
      const size_t to = a.failed ? std::min(find(a.lines, mlkey::kRunStop), a.lines.size())
                                 : a.lines.size();
      for (size_t k = from; k < to; ++k) out.push_back(a.lines[k]);
      started = true;
    }
    if (a.failed && started) out.push_back(restartLine(a, static_cast<int>(i) + 1));
  }
  return out;
}

}  // namespace bigbatch
