// The joined MLPerf log of a restarted job: one run_start (the first
// attempt's), one run_stop (the last one's), the failed attempts cut where
// they ended, a bigbatch_restart line after each failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bigbatch/common/mlperf_logger.h"
#include "bigbatch/launch/job_mlperf_log.h"

namespace bigbatch {
namespace {

std::string line(int64_t ms, const char* key, const nlohmann::ordered_json& value = nullptr) {
  return MlperfLogger::format(ms, MllogEvent::kPointInTime, key, value,
                              nlohmann::ordered_json::object());
}

// An attempt's log: header, init, run_start at `start`, one epoch, and
// (when `stop`) a run_stop with `status`.
std::vector<std::string> attempt(int64_t start, bool stop, const char* status) {
  std::vector<std::string> l = {line(start - 3, "submission_org", "bigbatch"),
                                line(start - 2, "init_start"), line(start - 1, "init_stop"),
                                line(start, "run_start"), line(start + 1, "epoch_start", 1)};
  if (stop) l.push_back(line(start + 2, "run_stop", status));
  return l;
}

int count(const std::vector<std::string>& lines, const char* key) {
  return static_cast<int>(std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
    return l.find(std::string("\"key\": \"") + key + "\"") != std::string::npos;
  }));
}

TEST(JobMlperfLog, OneRunStartAndOneRunStopAcrossTheAttempts) {
  AttemptLog first;
  first.lines = attempt(1000, /*stop=*/true, "aborted");  // a thrown error closes its log
  first.failed = true;
  first.endedAtMs = 1010;
  first.cause = "exit status 1, rank 1";
  first.rank = 1;
  first.resumedFromStep = 10;
  AttemptLog second;
  second.lines = attempt(2000, /*stop=*/false, "");  // SIGKILLed: no run_stop
  second.failed = true;
  second.endedAtMs = 2010;
  AttemptLog last;
  last.lines = attempt(3000, /*stop=*/true, "success");

  const std::vector<std::string> joined = joinAttemptLogs({first, second, last});
  EXPECT_EQ(count(joined, "run_start"), 1);
  EXPECT_EQ(count(joined, "run_stop"), 1);
  EXPECT_EQ(count(joined, "init_start"), 1);
  EXPECT_EQ(count(joined, "submission_org"), 1);
  EXPECT_EQ(count(joined, "epoch_start"), 3);
  EXPECT_EQ(count(joined, "bigbatch_restart"), 2);
  ASSERT_EQ(joined.size(), 5u + 1 + 1 + 1 + 1 + 1);
  EXPECT_EQ(joined[3], first.lines[3]);  // the first attempt's run_start
  EXPECT_NE(joined[5].find("\"time_ms\": 1010, \"event_type\": \"POINT_IN_TIME\", "
                           "\"key\": \"bigbatch_restart\", \"value\": 2"),
            std::string::npos)
      << joined[5];
  EXPECT_NE(joined[5].find("\"cause\": \"exit status 1, rank 1\", \"rank\": 1, "
                           "\"resumed_from_step\": 10"),
            std::string::npos)
      << joined[5];
  EXPECT_EQ(joined.back(), last.lines.back());  // run_stop, status success
  EXPECT_NE(joined.back().find("success"), std::string::npos);
}

// An attempt that failed before run_start (or wrote no log) adds nothing
// but its restart line once the run has started; before that, nothing.
TEST(JobMlperfLog, AttemptsThatNeverStartedAddNothing) {
  AttemptLog none;  // failed before the run directory held a log
  none.failed = true;
  AttemptLog initOnly;
  initOnly.lines = {line(5, "init_start")};
  initOnly.failed = true;
  AttemptLog last;
  last.lines = attempt(3000, true, "success");
  const std::vector<std::string> joined = joinAttemptLogs({none, initOnly, last});
  EXPECT_EQ(joined, last.lines);
  EXPECT_TRUE(joinAttemptLogs({none}).empty());
}

}  // namespace
}  // namespace bigbatch
