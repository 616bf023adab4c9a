// A request from outside to stop a run at its next step, checkpointed, so
// that it can be continued (`--resume auto`): Slurm's warning before a
// preemption or the time limit (`#SBATCH --signal=B:USR1@90`: SIGUSR1 to
// the batch shell, which is bigbatch's launcher; mpirun and srun pass it
// on to the ranks), or a user's `kill -USR1`. PyTorch Lightning's SLURM
// auto-requeue is the model: on the signal, save, requeue, exit.
//
// A rank only notes the request here; the trainer's ranks agree on the
// step to stop at (train/watch/stop_watch.h), write the checkpoint, and
// every rank exits with kStoppedExitStatus. The process that launched them
// (the supervisor, or the --workers launcher) then has the Slurm job
// requeued (`scontrol requeue $SLURM_JOB_ID`) and exits 0; outside Slurm it
// exits kStoppedExitStatus, which says "stopped, resumable".
//
// Threading: the flag is an atomic written by a signal handler; any thread
// reads it.
#pragma once

#include <csignal>

namespace bigbatch {

inline constexpr int kStopSignal = SIGUSR1;
// EX_TEMPFAIL (sysexits.h): a temporary condition, try again later.
inline constexpr int kStoppedExitStatus = 75;

// A rank: SIGUSR1 now sets the request instead of ending the process.
// Call once, early (before MPI starts its threads); idempotent.
void armStopRequest();
// Whether SIGUSR1 has come since armStopRequest (or clearStopRequest).
bool stopRequested();
// Tests: as if it never came.
void clearStopRequest();

}  // namespace bigbatch
