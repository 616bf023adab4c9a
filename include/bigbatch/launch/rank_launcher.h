// The program that starts a job's ranks for `bigbatch train --workers N`
// and for every attempt of the supervisor (--max-restarts): one small
// class per launcher, chosen by run.launcher.
//
//   mpirun  Open MPI's mpirun, or the words of BIGBATCH_MPIRUN (a
//           hostfile, the emulated cluster's ssh launcher): `-np N`, the
//           ranks unbound (each pins itself, launch_workers.h), and
//           `-x NAME` for every variable of kRankEnvironment that is set
//           and every NCCL_* variable (a cluster's network settings).
//   srun    Slurm's srun, inside an allocation: `--ntasks N`, the MPI
//           plugin Debian's Slurm and Open MPI share (PMIx: Slurm's
//           mpi_pmix_v4, Open MPI's external PMIx 4; SLURM_MPI_TYPE
//           overrides it), `--kill-on-bad-exit=1` (a rank that dies ends the
//           step instead of leaving the others waiting) and `--export=ALL`.
//           The ranks do not pin themselves: Slurm's task plugin binds them
//           to what the job asked (--cpus-per-task), and each rank runs as
//           many threads as CPUs it is given.
//
// Neither relies on the ranks sharing the launcher's environment: on real
// hosts ssh (mpirun's rsh launcher) carries none of it, and a cluster may
// set srun's --export=NONE. What the ranks need goes explicitly.
//
// Threading: value objects, any thread; environment reads only.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace bigbatch {

class WorkerPlacement;

class RankLauncher {
 public:
  // "mpirun" or "srun" (run.launcher); throws InvalidArgument naming the
  // choices otherwise.
  static std::unique_ptr<RankLauncher> named(const std::string& name);
  virtual ~RankLauncher() = default;

  virtual const char* name() const = 0;
  // The launcher's own words: BIGBATCH_MPIRUN's or {"mpirun"}; {"srun"}.
  virtual std::vector<std::string> program() const = 0;
  // Its options for `workers` ranks (`root`: this process runs as root),
  // before the hosts and the environment.
  virtual std::vector<std::string> rankArguments(int workers, bool root) const = 0;
  // The options that put the ranks on `placement`'s hosts and slots
  // (worker_placement.h) instead of wherever the launcher would: mpirun's
  // `--host a:2,b:1`, srun's arbitrary distribution over a node list.
  // Empty for the one local host.
  virtual std::vector<std::string> hostArguments(const WorkerPlacement& placement) const = 0;
  // The options that hand the ranks every variable of kRankEnvironment
  // (supervision_env.h) this process has set: call after setting them.
  virtual std::vector<std::string> environmentArguments() const = 0;
  // Whether its ranks pin themselves to this machine's CPUs, a share each
  // (launch_workers.h): not where they may run on other hosts, whose CPUs
  // are not this machine's to divide, nor where the launcher binds them.
  virtual bool ranksPinThemselves() const = 0;
};

}  // namespace bigbatch
