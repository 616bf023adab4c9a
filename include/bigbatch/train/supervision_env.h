// The environment a supervised job's workers get from the launcher that
// restarts them (bigbatch train --max-restarts, apps/supervise_workers.h),
// declared once for both sides. A job started by hand or by a scheduler
// has none of them set, and trains as it would unsupervised.
//
// Constants only; thread-safe.
#pragma once

namespace bigbatch {

// Which attempt this is: 0 for the first, 1 after one restart (torchrun's
// TORCHELASTIC_RESTART_COUNT). fault.attempts reads it.
inline constexpr const char* kRestartCountEnv = "BIGBATCH_RESTART_COUNT";

// A file rank 0 overwrites with the global step after every optimizer step
// (src/train/step_marker.h): after a failure the launcher reads there how
// far the attempt got.
inline constexpr const char* kStepFileEnv = "BIGBATCH_STEP_FILE";

// The Unix time (ms) of the job's first run_start: the MLPerf time-to-train
// clock keeps running across restarts, as the user's wall clock does.
inline constexpr const char* kJobRunStartEnv = "BIGBATCH_JOB_RUN_START_MS";

}  // namespace bigbatch
