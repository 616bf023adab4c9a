#include "bigbatch/train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace bigbatch {

namespace {

// Under mpirun a rank's stdout is a pseudo-terminal even when the user's is a
// file, so there the launcher's answer (BIGBATCH_STDOUT_TTY, set by
// `--workers`) decides; a job started by mpirun directly prints plain lines.
bool stdoutIsTerminal() {
  if (const char* v = std::getenv("BIGBATCH_STDOUT_TTY")) return std::string(v) == "1";
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "TORCHELASTIC_RUN_ID"}) {
    if (std::getenv(v)) return false;
  }
  return ::isatty(STDOUT_FILENO) == 1;
}

}  // namespace

Progress::Progress(bool enabled, double plainIntervalS)
    : enabled_(enabled), tty_(stdoutIsTerminal()), plainIntervalS_(plainIntervalS) {}

void Progress::startEpoch(int64_t epoch, int64_t epochs, int64_t steps) {
  epoch_ = epoch;
  epochs_ = epochs;
  steps_ = steps;
  epochStart_ = lastPrint_ = Clock::now();
}

bool Progress::due(int64_t step) const {
  if (!enabled_) return false;
  const double sinceLast = std::chrono::duration<double>(Clock::now() - lastPrint_).count();
  return sinceLast >= (tty_ ? 0.25 : plainIntervalS_) || (tty_ && step == steps_);
}

void Progress::update(int64_t step, int64_t images, double meanLoss) {
  if (!due(step)) return;
  const auto now = Clock::now();
  lastPrint_ = now;
  const double elapsed = std::chrono::duration<double>(now - epochStart_).count();
  const double imgS = elapsed > 0 ? static_cast<double>(images) / elapsed : 0;
  const double eta = step > 0 ? elapsed * static_cast<double>(steps_ - step) / step : 0;
  if (tty_) {
    constexpr int kWidth = 24;
    const int filled = steps_ > 0 ? static_cast<int>(kWidth * step / steps_) : kWidth;
    fmt::print("\r\033[Kepoch {:>3}/{} [{}{}] {}/{}  {:7.0f} img/s  loss {:.4f}  ETA {:4.0f} s",
               epoch_, epochs_, std::string(filled, '#'), std::string(kWidth - filled, '.'), step,
               steps_, imgS, meanLoss, eta);
    drawn_ = true;
  } else {
    fmt::print("  epoch {}/{} step {}/{} ({:.0f}%)  {:.0f} img/s  loss {:.4f}  ETA {:.0f} s\n",
               epoch_, epochs_, step, steps_, 100.0 * step / steps_, imgS, meanLoss, eta);
  }
  std::fflush(stdout);
}

void Progress::finishEpoch() {
  if (enabled_ && tty_ && drawn_) {
    fmt::print("\r\033[K");
    std::fflush(stdout);
  }
  drawn_ = false;
}

}  // namespace bigbatch
