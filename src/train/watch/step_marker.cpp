#include "watch/step_marker.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "bigbatch/common/supervision_env.h"

namespace bigbatch::train_detail {

StepMarker::StepMarker(bool lead) {
  const char* path = std::getenv(kStepFileEnv);
  if (!lead || path == nullptr || *path == '\0') return;
  fd_ = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  // Without it the supervisor only cannot say the failure's step: not a
  // reason to stop training.
}

StepMarker::~StepMarker() {
  if (fd_ >= 0) ::close(fd_);
}

void StepMarker::record(int64_t globalStep) {
  if (fd_ < 0) return;
  char line[24];
  const int n = std::snprintf(line, sizeof line, "%20lld\n", static_cast<long long>(globalStep));
  (void)!::pwrite(fd_, line, static_cast<size_t>(n), 0);
}

}  // namespace bigbatch::train_detail
