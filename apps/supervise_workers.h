// `bigbatch train ... --max-restarts N`: the launcher stays as a supervisor
// instead of becoming mpirun (torchrun's --max-restarts). It starts the
// job's ranks through mpirun in a process group of their own, waits, and
// when the job fails — a rank exits non-zero, is killed, or is named as
// stalled by the watchdog (which ends the job) — makes sure every process
// of that attempt is gone (SIGKILL to the group, then waits until none is
// left: no orphan keeps a port, a shared-memory window or a GPU), and
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
// the job and end it without a restart.
//
// Threading: the main thread only; installs SIGINT/SIGTERM handlers.
#pragma once

#include <string>

namespace bigbatch {

struct SupervisorSettings {
  int workers = 1;
  int threadsPerRank = 0;  // run.threads; 0: CPUs / workers
  int maxRestarts = 0;
  std::string runDir;         // every attempt's --run-dir
  std::string checkpointDir;  // where `latest` appears (ckpt.dir, else RUN_DIR/checkpoints)
};

// Runs the job (argv: `bigbatch train ...` as the user typed it) until it
// succeeds or has failed maxRestarts + 1 times; returns the exit status.
int superviseWorkers(const SupervisorSettings& settings, int argc, char** argv);

}  // namespace bigbatch
