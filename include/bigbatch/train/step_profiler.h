// StepProfiler: libtorch's Kineto profiler around training steps FIRST..LAST
// (`bigbatch train --profile-steps A-B --profile-out FILE`; issue 55): the
// host's ATen operators and the device's kernels, copies and runtime calls
// (CUPTI), written as one Chrome trace (chrome://tracing, Perfetto) when
// step LAST ends. Each step is a "ProfilerStep#N" range, as PyTorch's
// torch.profiler marks its steps, so scripts/profile_summary.py reads both
// sides' traces the same way. The device is synchronised before the trace
// is taken, so the last step's kernels are in it.
//
// The CUDA variant only (its libtorch 2.x is built with Kineto); in the CPU
// build available() is false and the constructor refuses, naming the CUDA
// build and --timeline (the host-side step timeline every build has).
//
// Threading: the training thread (the profiler records every thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace bigbatch {

class StepProfiler {
 public:
  static bool available();
  // Throws InvalidArgument where !available(), or for an empty range.
  StepProfiler(std::string path, int64_t firstStep, int64_t lastStep);
  ~StepProfiler();  // a run shorter than the range: the trace of what ran
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Around global step `step` (1-based): starts the profiler at firstStep,
  // marks the step's range, and stops and writes the trace after lastStep.
  void beforeStep(int64_t step);
  void afterStep(int64_t step);
  bool written() const { return written_; }

 private:
  void finish();

  std::string path_;
  int64_t first_, last_;
  bool running_ = false, written_ = false;
  struct Range;
  std::unique_ptr<Range> range_;  // the open step's ProfilerStep#N
};

}  // namespace bigbatch
