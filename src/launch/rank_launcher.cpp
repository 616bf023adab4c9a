#include "bigbatch/launch/rank_launcher.h"

#include <cstdlib>
#include <sstream>
#include <string>

#include "bigbatch/common/error.h"
#include "bigbatch/common/supervision_env.h"
#include "bigbatch/launch/launch_workers.h"
#include "bigbatch/launch/worker_placement.h"

extern char** environ;  // the process's environment (unistd.h's, declared as POSIX says)

namespace bigbatch {
namespace {

// The nodes of the Slurm allocation this process runs in; 0: none.
int slurmNodes() {
  const char* nodes = std::getenv("SLURM_JOB_NUM_NODES");
  return nodes != nullptr ? std::atoi(nodes) : 0;
}

class MpirunLauncher final : public RankLauncher {
 public:
  const char* name() const override { return "mpirun"; }
  std::vector<std::string> program() const override { return mpirunLauncher(); }
  std::vector<std::string> rankArguments(int workers, bool root) const override {
    std::vector<std::string> args = {"-np", std::to_string(workers)};
    if (root) args.push_back("--allow-run-as-root");
    // Unbound: the ranks bind themselves (pinLaunchedRank), and mpirun's
    // slot count (physical cores) must not refuse more ranks than that on SMT.
    args.insert(args.end(), {"--oversubscribe", "--bind-to", "none"});
    return args;
  }
  std::vector<std::string> hostArguments(const WorkerPlacement& p) const override {
    const auto& hosts = p.hosts();
    if (hosts.size() == 1 && hosts[0].name.empty()) return {};
    std::string list;
    for (const auto& h : hosts) {
      if (!list.empty()) list += ',';
      list += h.name + ":" + std::to_string(h.slots.size());
    }
    return {"--host", list};
  }
  std::vector<std::string> environmentArguments() const override {
    std::vector<std::string> args;
    for (const char* name : kRankEnvironment) {
      if (std::getenv(name) != nullptr) args.insert(args.end(), {"-x", name});
    }
    // NCCL's settings a cluster needs (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...)
    // as the user exported them, e.g. in a batch script.
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (entry.rfind("NCCL_", 0) == 0)
        args.insert(args.end(), {"-x", entry.substr(0, entry.find('='))});
    }
    return args;
  }
  bool ranksPinThemselves() const override {
    // Not under a launcher of the user's, nor mpirun inside a Slurm
    // allocation of several nodes, which places the ranks there.
    return std::getenv(kMpirunEnv) == nullptr && slurmNodes() <= 1;
  }
};

class SrunLauncher final : public RankLauncher {
 public:
  const char* name() const override { return "srun"; }
  std::vector<std::string> program() const override { return {"srun"}; }
  std::vector<std::string> rankArguments(int workers, bool /*root*/) const override {
    std::vector<std::string> args = {"--ntasks", std::to_string(workers), "--kill-on-bad-exit=1"};
    // Slurm 22.05 (Debian 12's) no longer hands a step the batch job's
    // --cpus-per-task; without it a rank may be bound to one CPU.
    if (const char* cpus = std::getenv("SLURM_CPUS_PER_TASK"); cpus != nullptr && *cpus != '\0') {
      args.push_back(std::string("--cpus-per-task=") + cpus);
    }
    // PMIx is what Debian 12's Slurm (mpi_pmix_v4) and Open MPI (external
    // PMIx 4.2) share; its PMI-2 plugin starts no Open MPI rank. A site's
    // SLURM_MPI_TYPE stands.
    if (std::getenv("SLURM_MPI_TYPE") == nullptr) args.push_back("--mpi=pmix");
    return args;
  }
  std::vector<std::string> hostArguments(const WorkerPlacement& p) const override {
    // One node name per rank, in rank order (mapping by slot): srun's
    // arbitrary distribution puts rank r on the r-th.
    std::string list;
    for (const auto& h : p.hosts()) {
      for (size_t s = 0; s < h.slots.size(); ++s) {
        if (!list.empty()) list += ',';
        list += h.name;
      }
    }
    if (list.empty() || (p.hosts().size() == 1 && p.hosts()[0].name.empty())) return {};
    return {"--distribution=arbitrary", "--nodelist=" + list};
  }
  std::vector<std::string> environmentArguments() const override {
    // Everything this process has, the ranks' variables included (set by
    // then): --export cannot carry a value with a comma (BIGBATCH_SLOTS).
    return {"--export=ALL"};
  }
  bool ranksPinThemselves() const override { return false; }
};

}  // namespace

std::unique_ptr<RankLauncher> RankLauncher::named(const std::string& name) {
  if (name == "mpirun") return std::make_unique<MpirunLauncher>();
  if (name == "srun") return std::make_unique<SrunLauncher>();
  BIGBATCH_THROW(InvalidArgument,
                 "run.launcher = \"{}\": give \"mpirun\" (Open MPI's, or BIGBATCH_MPIRUN) or "
                 "\"srun\" (Slurm's, inside an allocation)",
                 name);
}

}  // namespace bigbatch
