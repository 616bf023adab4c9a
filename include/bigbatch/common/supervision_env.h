// The environment bigbatch's launcher gives the ranks it starts
// (`bigbatch train --workers N`, and the supervisor of --max-restarts,
// include/bigbatch/launch/supervise_workers.h), declared once for both
// sides. A job started by hand or by a scheduler has none of them set, and
// trains as it would unsupervised.
//
// Every one of them travels to the ranks explicitly — mpirun's `-x NAME`,
// srun's --export — never by the ranks sharing the launcher's environment:
// a rank that ssh started (mpirun's rsh launcher) or srun started with
// --export=NONE sees none of the launcher's variables otherwise
// (kRankEnvironment, launch_workers.cpp).
//
// Constants only; thread-safe.
#pragma once

#include <array>

namespace bigbatch {

// Which attempt this is: 0 for the first, 1 after one restart (torchrun's
// TORCHELASTIC_RESTART_COUNT). fault.attempts reads it.
inline constexpr const char* kRestartCountEnv = "BIGBATCH_RESTART_COUNT";

// A file rank 0 overwrites with the global step after every optimizer step
// (src/train/watch/step_marker.h): after a failure the launcher reads there how
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
// (src/train/watch/supervisor_watch.h).
inline constexpr const char* kSupervisorEnv = "BIGBATCH_SUPERVISOR";

// A file rank 0 writes once every rank has started: where each rank runs
// (its host's name and addresses, its local rank and slot; one small
// gather, include/bigbatch/common/rank_placement.h). After a failure the supervisor
// reads there what the failed rank actually was, whatever mapping the
// launcher used (--map-by node, --rank-by, -npernode, srun's distribution).
inline constexpr const char* kPlacementFileEnv = "BIGBATCH_PLACEMENT_FILE";

// How many CPUs each rank pins itself to (launch_workers.h,
// pinLaunchedRank); unset: none.
inline constexpr const char* kCpusPerRankEnv = "BIGBATCH_CPUS_PER_RANK";

// "1" when the user's stdout is a terminal: a rank's own stdout is its
// launcher's pipe, so it cannot tell (src/train/run/progress.cpp).
inline constexpr const char* kStdoutTtyEnv = "BIGBATCH_STDOUT_TTY";

// Every variable above: what the launcher hands each rank it starts, when
// set in the launcher's environment.
inline constexpr std::array<const char*, 8> kRankEnvironment = {
    kRestartCountEnv, kStepFileEnv,      kJobRunStartEnv, kSlotsEnv,
    kSupervisorEnv,   kPlacementFileEnv, kCpusPerRankEnv, kStdoutTtyEnv};

}  // namespace bigbatch
