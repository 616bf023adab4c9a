#include "bigbatch/train/timeline.h"

#include <fmt/format.h>

#include <fstream>

#include "bigbatch/common/error.h"

namespace bigbatch {

Timeline::Timeline(int rank, int64_t firstStep, int64_t lastStep)
    : rank_(rank), firstStep_(firstStep), lastStep_(lastStep) {}

void Timeline::setStep(int64_t step) {
  step_ = step;
  active_ = step >= firstStep_ && step <= lastStep_;
}

void Timeline::record(const std::string& name, int thread, Clock::time_point start,
                      Clock::time_point end, const std::string& argsJson) {
  // Microseconds on the host's monotonic clock: ranks of one host line up.
  const auto us = [](Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
  };
  std::string e = fmt::format(
      R"({{"name":"{}","cat":"{}","ph":"X","pid":{},"tid":{},"ts":{:.1f},"dur":{:.1f},"args":{{"step":{}{}{}}}}})",
      name, thread == kCommThread ? "comm" : "compute", rank_, thread, us(start), us(end) - us(start),
      step_, argsJson.empty() ? "" : ",", argsJson);
  std::lock_guard<std::mutex> lock(mutex_);
  events_.push_back(std::move(e));
}

std::string Timeline::eventsJson() const {
  std::string out = fmt::format(
      R"({{"name":"process_name","ph":"M","pid":{0},"args":{{"name":"rank {0}"}}}},)"
      R"({{"name":"thread_name","ph":"M","pid":{0},"tid":0,"args":{{"name":"compute"}}}},)"
      R"({{"name":"thread_name","ph":"M","pid":{0},"tid":1,"args":{{"name":"comm"}}}})",
      rank_);
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& e : events_) {
    out += ",";
    out += e;
  }
  return out;
}

void Timeline::write(const std::string& path, const std::vector<std::string>& parts) {
  std::ofstream out(path);
  BIGBATCH_REQUIRE(out.good(), IoError, "cannot write timeline '{}'", path);
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  for (size_t i = 0; i < parts.size(); ++i) out << (i ? "," : "") << parts[i];
  out << "]}\n";
  BIGBATCH_REQUIRE(out.good(), IoError, "writing timeline '{}' failed", path);
}

std::pair<int64_t, int64_t> parseStepRange(const std::string& text) {
  const size_t dash = text.find('-');
  int64_t a = 0, b = 0;
  try {
    if (dash == std::string::npos) throw std::invalid_argument("no dash");
    size_t pa = 0, pb = 0;
    a = std::stoll(text.substr(0, dash), &pa);
    b = std::stoll(text.substr(dash + 1), &pb);
    if (pa != dash || pb != text.size() - dash - 1) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    BIGBATCH_THROW(InvalidArgument, "--timeline-steps '{}': expected FIRST-LAST, e.g. 1-100",
                   text);
  }
  BIGBATCH_REQUIRE(a >= 1 && b >= a, InvalidArgument,
                   "--timeline-steps '{}': need 1 <= FIRST <= LAST", text);
  return {a, b};
}

}  // namespace bigbatch
