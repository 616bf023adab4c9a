#include "bigbatch/train/step_profiler.h"

#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"

#ifdef BIGBATCH_WITH_CUDA
#include <ATen/record_function.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/torch.h>
#endif

namespace bigbatch {

#ifdef BIGBATCH_WITH_CUDA

namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

struct StepProfiler::Range {
  std::string name;  // outlives the record
  at::RecordFunction fn{at::RecordScope::USER_SCOPE};
};

bool StepProfiler::available() { return true; }

namespace {

ProfilerConfig kinetoConfig() {
  return ProfilerConfig(ProfilerState::KINETO, /*report_input_shapes=*/false,
                        /*profile_memory=*/false, /*with_stack=*/false);
}

std::set<ActivityType> activities() {
  std::set<ActivityType> a{ActivityType::CPU};
  if (torch::cuda::is_available()) a.insert(ActivityType::CUDA);
  return a;
}

}  // namespace

void StepProfiler::beforeStep(int64_t step) {
  if (written_ || step < first_ || step > last_) return;
  if (!running_) {
    kineto::prepareProfiler(kinetoConfig(), activities());
    kineto::enableProfiler(kinetoConfig(), activities());
    running_ = true;
  }
  range_ = std::make_unique<Range>();
  range_->name = "ProfilerStep#" + std::to_string(step);
  if (range_->fn.isActive()) {
    range_->fn.before(std::string_view(range_->name), c10::ArrayRef<const c10::IValue>{});
  }
}

void StepProfiler::afterStep(int64_t step) {
  range_.reset();  // ends the step's range
  if (running_ && step >= last_) finish();
}

void StepProfiler::finish() {
  range_.reset();
  if (!running_) return;
  running_ = false;
  if (torch::cuda::is_available()) torch::cuda::synchronize();  // the last kernels into the trace
  const std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
  result->save(path_);
  written_ = true;
  log().info("profile of steps {}-{} written to {}", first_, last_, path_);
}

#else

struct StepProfiler::Range {};

bool StepProfiler::available() { return false; }

void StepProfiler::beforeStep(int64_t) {}
void StepProfiler::afterStep(int64_t) {}
void StepProfiler::finish() {}

#endif

StepProfiler::StepProfiler(std::string path, int64_t firstStep, int64_t lastStep)
    : path_(std::move(path)), first_(firstStep), last_(lastStep) {
  BIGBATCH_REQUIRE(available(), InvalidArgument,
                   "--profile-out needs the CUDA build of bigbatch (scripts/build-cuda): its "
                   "libtorch 2.x records with Kineto, which the CPU build's libtorch 1.13 lacks; "
                   "on the CPU, --timeline records where each step's time goes");
  BIGBATCH_REQUIRE(!path_.empty() && firstStep >= 1 && lastStep >= firstStep, InvalidArgument,
                   "--profile-steps {}-{} with --profile-out '{}': give steps FIRST-LAST with 1 <= "
                   "FIRST <= LAST and a file to write",
                   firstStep, lastStep, path_);
}

StepProfiler::~StepProfiler() {
  try {
    finish();
  } catch (const std::exception& e) {
    log().warn("the profile could not be written to {}: {}", path_, e.what());
  }
}

}  // namespace bigbatch
