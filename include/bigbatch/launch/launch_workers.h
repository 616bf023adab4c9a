// `bigbatch train ... --workers N`: runs the same command under a launcher
// (rank_launcher.h: `mpirun -np N`, or `srun --ntasks N` inside a Slurm
// allocation), so a user never types either.
//
// CPUs: each rank gets T threads (run.threads, or the CPUs this process may
// use ÷ N) and, when N·T CPUs are there, its own T of them: mpirun starts
// the ranks unbound (`--bind-to none`) and each rank pins itself to CPUs
// [local rank·T, local rank·T + T) of that set before it starts a thread
// (pinLaunchedRank). mpirun's `--bind-to core` would tie a rank of T threads
// to one core; `--map-by slot:PE=T` counts physical cores, which is wrong
// on SMT machines. With more threads than CPUs the ranks stay unbound and
// share them.
//
// BIGBATCH_MPIRUN replaces `mpirun` with a launcher of the user's (its
// words split on spaces, e.g. "mpirun --hostfile hosts"; the emulated
// cluster's `--launcher` mode sets it to its own): the same options follow
// it, and the ranks do not pin themselves, since they may be on other hosts
// (nor inside a Slurm allocation of several nodes, where the launcher
// places the ranks on them).
//
// Everything the ranks need from this process goes on the launcher's
// command line (RankLauncher::environmentArguments): on ssh-started hosts
// nothing else of this environment reaches them.
#pragma once

#include <string>
#include <vector>

#include "bigbatch/launch/rank_launcher.h"

namespace bigbatch {

class WorkerPlacement;

// The environment variable naming the launcher (default: mpirun).
inline constexpr const char* kMpirunEnv = "BIGBATCH_MPIRUN";

// BIGBATCH_MPIRUN's words, or {"mpirun"} when it is unset; throws
// InvalidArgument, naming it, when it is set but empty.
std::vector<std::string> mpirunLauncher();

// True when this process should start the workers itself (N > 1 and not
// already started by an MPI launcher).
bool shouldLaunchWorkers(int workers);

// The CPUs each of `workers` ranks of `threadsPerRank` threads (0: an
// equal share) pins itself to on `cpus` CPUs; 0 when they do not fit, and
// the ranks then share them unpinned.
int cpusPerRank(int workers, int threadsPerRank, int cpus);

// The launcher's whole command line for `workers` ranks running this binary
// with `trainArgs` (argv without the program). The variables the ranks
// need (their CPU share, whether stdout is a terminal; the supervisor's
// own, set before) are set in this process and named on the command line
// for the launcher to hand over. `placement` (where the ranks go, after a
// lost worker was left out) replaces any host list of the launcher's.
std::vector<std::string> workerLaunch(const RankLauncher& launcher, int workers,
                                      int threadsPerRank,
                                      const std::vector<std::string>& trainArgs,
                                      const WorkerPlacement* placement = nullptr);

// argv[1..] without the options in `withValue` (and their values, as
// `--opt V` or `--opt=V`) and without the bare `flags`.
std::vector<std::string> argumentsWithout(int argc, char** argv,
                                          const std::vector<std::string>& withValue,
                                          const std::vector<std::string>& flags);

// Runs the launcher with argv (minus --workers) for `workers` ranks and
// waits for it; `threadsPerRank` 0 means CPUs ÷ workers. Returns the job's
// exit status (128 + N for a signal). mpirun's stderr is passed on, and
// when the job failed its first bigbatch error line is printed again last,
// after mpirun's own report. SIGINT, SIGTERM and SIGHUP go to the job; it
// gets SIGTERM if this process dies (PR_SET_PDEATHSIG). SIGUSR1 goes to the
// job too (a stop at a checkpoint, common/stop_request.h): when the job then
// ends stopped (75), or fails after it, this returns endStoppedJob()'s
// status — 0 once the Slurm job is requeued, else 75 (slurm_requeue.h).
// Throws IoError when no process can be started.
int launchWorkers(const RankLauncher& launcher, int workers, int threadsPerRank, int argc,
                  char** argv);

// In a rank that launchWorkers started with pinning: pins this process to
// its share of the CPUs. Call before any thread starts; a no-op elsewhere.
void pinLaunchedRank();

}  // namespace bigbatch
