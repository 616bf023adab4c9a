// `bigbatch train ... --max-restarts N`: the launcher stays as a supervisor
// instead of becoming mpirun (torchrun's --max-restarts). It starts the
// job's ranks through mpirun in a process group of their own, waits, and
// when the job fails — a rank exits non-zero, is killed, or is named as
// stalled by the watchdog (which ends the job) — makes sure every process
// of that attempt is gone (SIGKILL to the group and to every descendant —
// it is a child subreaper, so a rank whose parent died stays its
// descendant — then waits until none is left: no orphan keeps a port, a
// shared-memory window or a GPU), and
// starts the job again with `--resume auto` from the newest complete
// checkpoint in the same run directory (from the start, with --overwrite,
// when the failure came before the first checkpoint). With the same world
// size the resumed run is bit-exact, so the final model is the one an
// uninterrupted run writes.
//
// Each failure goes to the terminal and to RUN_DIR/restarts.json (attempt,
// exit status or signal, seconds into the attempt, the checkpoint step the
// next attempt resumes from); a run that finishes has the same list as
// `restarts` in summary.json. After N restarts the supervisor gives up,
// exits 1 and prints every failure. SIGINT/SIGTERM to the supervisor go to
// the job and end it without a restart (exit status 128 + the signal), and SIGHUP (its terminal gone) ends
// the job with SIGTERM; one that arrives between two attempts stops the
// next from starting. The job does not outlive the supervisor: mpirun gets
// SIGTERM when the supervisor dies (PR_SET_PDEATHSIG, e.g. after a
// SIGKILL), and the ranks on its host end themselves when it is gone
// (BIGBATCH_SUPERVISOR, src/train/watch/supervisor_watch.h).
//
// Fewer workers (--min-workers M, Horovod elastic's --min-np): a worker
// that fails again in the attempt right after its restart — the same rank
// named twice in a row, so a restart on the same world did not bring it
// back (a lost device, a host gone) — is dropped, and the job goes on with
// one worker fewer, down to M, from the newest checkpoint, without the lost
// worker's place: its slot on its host, so its GPU, and a host whose every
// slot is gone, are not used again (worker_placement.h; where the launcher
// does not say the hosts — a Slurm allocation without a hostfile — the
// next attempt takes the first slots, said in a warning). The global batch
// stays: train.batch_size is kept and the accumulation steps absorb the
// smaller world (resume on another world size, docs/RELIABILITY.md); the
// launcher checks before anything starts that every world from M to N
// divides it. One failure alone never shrinks the job: a transient fault
// is recovered on the same world, bit-exact.
//
// Threading: the main thread only; installs SIGINT/SIGTERM handlers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace bigbatch {

struct SupervisorSettings {
  std::string launcher = "mpirun";  // run.launcher (rank_launcher.h)
  int workers = 1;
  int threadsPerRank = 0;  // run.threads; 0: CPUs / workers
  int maxRestarts = 0;
  int minWorkers = 0;         // 0: workers (never fewer)
  int64_t batchPerRank = 0;   // train.batch_size
  int64_t globalBatch = 0;    // kept when the world shrinks
  std::string runDir;         // every attempt's --run-dir
  std::string checkpointDir;  // where `latest` appears (ckpt.dir, else RUN_DIR/checkpoints)
  // Tests only: called after a failed attempt is handled, before the next
  // one (its number) starts — where a signal must still stop the job.
  std::function<void(int attempt)> betweenAttempts;
};

// Runs the job (argv: `bigbatch train ...` as the user typed it) until it
// succeeds or has failed maxRestarts + 1 times; returns the exit status.
int superviseWorkers(const SupervisorSettings& settings, int argc, char** argv);

// Throws InvalidArgument, naming --min-workers and the fix, unless every
// world size from minWorkers to workers keeps the global batch with
// train.batch_size unchanged (a whole number of accumulation steps).
void checkWorldsKeepBatch(const SupervisorSettings& settings);

// The rank a bigbatch error line of the job names as the one that failed:
// the peer it blames ("[rank 0] rank 2 failed: ...", "... stopped
// answering: rank 2 ..."), else its writer ("[rank 2] ..."); -1: none. The
// ranks' lines reach mpirun's stderr in no fixed order, so the first error
// line may be a survivor's.
int failedRankIn(const std::string& line);

// The accumulation steps that keep the global batch on `world` workers.
int64_t accumulationFor(const SupervisorSettings& settings, int world);

}  // namespace bigbatch
