// The environment a supervised job's workers get from the launcher that
// restarts them (bigbatch train --max-restarts, include/bigbatch/launch/supervise_workers.h),
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

// The slots the ranks of this attempt run in, per host in the launcher's
// order: "0,2,3" on one host, "0,1|1" across two (host 0 keeps slots 0 and
// 1, host 1 only slot 1). A rank's slot picks its GPU (slot mod the GPUs of
// its host) and its fault.slot; after a worker is lost the supervisor
// leaves its slot out (include/bigbatch/common/launch_slot.h). Unset: slot
// = local rank.
inline constexpr const char* kSlotsEnv = "BIGBATCH_SLOTS";

// "HOST:PID:START" of the supervisor that started this job (START: the
// process's start time in clock ticks, /proc/PID/stat field 22, so a reused
// pid is not taken for it). A rank on that host ends itself when the
// supervisor is gone (a SIGKILL, an OOM kill), so no rank outlives it
// (src/train/supervisor_watch.h).
inline constexpr const char* kSupervisorEnv = "BIGBATCH_SUPERVISOR";

}  // namespace bigbatch
