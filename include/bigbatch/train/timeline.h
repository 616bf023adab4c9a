// Timeline: a Chrome-trace (Trace Event Format) recorder of where a run's
// time goes, opened by chrome://tracing and Perfetto. One process track per
// rank and one thread track per role: "compute" (data, forward, backward,
// exposed comm wait, optimizer, evaluation) and "comm" (each bucket's
// allreduce). Only steps in [firstStep, lastStep] are recorded, so a long run
// gives a bounded file (about 6 events + 1 per bucket per step).
//
// Thread-safe: the compute and communication threads record concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace bigbatch {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kComputeThread = 0;
  static constexpr int kCommThread = 1;

  Timeline(int rank, int64_t firstStep, int64_t lastStep);

  // Marks the step now running (1-based); recording is on inside the range.
  void setStep(int64_t step);
  bool active() const { return active_; }
  // A complete event ("ph": "X") from start to end on `thread`.
  void record(const std::string& name, int thread, Clock::time_point start, Clock::time_point end,
              const std::string& argsJson = "");

  // This rank's events as a JSON array body (comma-separated objects), with
  // process and thread name metadata.
  std::string eventsJson() const;
  // Writes {"traceEvents": [...]} from the ranks' eventsJson() parts.
  static void write(const std::string& path, const std::vector<std::string>& parts);

 private:
  int rank_;
  int64_t firstStep_, lastStep_;
  bool active_ = false;
  int64_t step_ = 0;
  mutable std::mutex mutex_;
  std::vector<std::string> events_;
};

// Parses "A-B" (1-based, inclusive) as given to --timeline-steps.
std::pair<int64_t, int64_t> parseStepRange(const std::string& text);

}  // namespace bigbatch
