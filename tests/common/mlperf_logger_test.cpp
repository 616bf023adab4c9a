// MLLOG lines: the exact byte format of mlperf_logging.mllog.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "bigbatch/common/mlperf_logger.h"

namespace bigbatch {
namespace {

TEST(MlperfLogger, FormatMatchesMllogByteForByte) {
  nlohmann::ordered_json meta;
  meta["file"] = "train.py";
  meta["lineno"] = 42;
  meta["epoch_num"] = 3;
  EXPECT_EQ(MlperfLogger::format(1234, MllogEvent::kPointInTime, "eval_accuracy", 0.5, meta),
            ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1234, \"event_type\": \"POINT_IN_TIME\", "
            "\"key\": \"eval_accuracy\", \"value\": 0.5, \"metadata\": {\"file\": \"train.py\", "
            "\"lineno\": 42, \"epoch_num\": 3}}");
  EXPECT_EQ(MlperfLogger::format(7, MllogEvent::kIntervalStart, "run_start", nullptr,
                                 nlohmann::ordered_json::object()),
            ":::MLLOG {\"namespace\": \"\", \"time_ms\": 7, \"event_type\": \"INTERVAL_START\", "
            "\"key\": \"run_start\", \"value\": null, \"metadata\": {}}");
}

TEST(MlperfLogger, PythonJsonSeparatorsNested) {
  nlohmann::ordered_json v = {{"a", {1, 2}}, {"b", {{"c", "é"}}}};
  EXPECT_EQ(pythonJsonDump(v), "{\"a\": [1, 2], \"b\": {\"c\": \"\\u00e9\"}}");
}

TEST(MlperfLogger, WritesFileWithCallSite) {
  const std::string path = ::testing::TempDir() + "/mllog_test.log";
  std::remove(path.c_str());
  {
    MlperfLogger ml;
    ml.open(path, false);
    BIGBATCH_MLLOG_POINT(ml, mlkey::kEvalAccuracy, 0.75, {{"epoch_num", 2}});
    BIGBATCH_MLLOG_END(ml, mlkey::kRunStop, {{"status", "success"}});
  }
  std::ifstream in(path);
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) {
    ASSERT_EQ(line.rfind(":::MLLOG ", 0), 0u) << line;
    lines.push_back(nlohmann::json::parse(line.substr(9)));
  }
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["key"], "eval_accuracy");
  EXPECT_EQ(lines[0]["metadata"]["epoch_num"], 2);
  EXPECT_EQ(lines[0]["metadata"]["file"], "tests/common/mlperf_logger_test.cpp");
  EXPECT_GT(lines[0]["metadata"]["lineno"].get<int>(), 0);
  EXPECT_EQ(lines[1]["event_type"], "INTERVAL_END");
  EXPECT_EQ(lines[1]["metadata"]["status"], "success");
  EXPECT_GE(lines[1]["time_ms"].get<int64_t>(), lines[0]["time_ms"].get<int64_t>());
}

}  // namespace
}  // namespace bigbatch
