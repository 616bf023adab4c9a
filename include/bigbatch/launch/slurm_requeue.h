// The end of a job that stopped on request (SIGUSR1, common/stop_request.h:
// every rank checkpointed at one step and exited kStoppedExitStatus): in a
// Slurm batch job, the job is requeued (`scontrol requeue $SLURM_JOB_ID`,
// as PyTorch Lightning does on SLURM's warning signal) so that Slurm starts
// its script again, which continues with `--resume auto`; the example
// sbatch files ask for the warning (`#SBATCH --signal=B:USR1@90`). Called
// by the process at the top of the job: the supervisor, the --workers
// launcher, or a one-rank `bigbatch train` that nothing launched.
//
// The launcher's main thread.
#pragma once

namespace bigbatch {

// Says on stderr that the job stopped at a checkpoint, and requeues it when
// this process runs in a Slurm job (SLURM_JOB_ID). Returns the launcher's
// exit status: 0 once requeued, kStoppedExitStatus otherwise (not under
// Slurm, or scontrol refused: said, with the fix).
int endStoppedJob();

}  // namespace bigbatch
