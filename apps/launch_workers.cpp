#include "launch_workers.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "bigbatch/comm/mpi_communicator.h"
#include "bigbatch/common/error.h"

namespace bigbatch {

bool shouldLaunchWorkers(int workers) {
  return workers > 1 && !MpiCommunicator::launchedByMpi();
}

void launchWorkers(int workers, int argc, char** argv) {
  char self[PATH_MAX];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  BIGBATCH_REQUIRE(len > 0, IoError, "cannot find this binary's path: {}", std::strerror(errno));
  self[len] = '\0';
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());

  std::vector<std::string> args = {"mpirun", "-np", std::to_string(workers)};
  if (geteuid() == 0) args.push_back("--allow-run-as-root");
  if (static_cast<unsigned>(workers) > cores) {
    // More ranks than cores: let them share, unpinned.
    args.insert(args.end(), {"--oversubscribe", "--bind-to", "none"});
  } else {
    args.insert(args.end(), {"--bind-to", "core"});
  }
  args.push_back(self);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--workers") {
      ++i;  // and its value
      continue;
    }
    if (a.rfind("--workers=", 0) == 0) continue;
    args.push_back(a);
  }
  // The ranks' stdout is a pipe or pty of mpirun's; tell them what the
  // user's is, so the progress bar is drawn only on a real terminal.
  setenv("BIGBATCH_STDOUT_TTY", isatty(STDOUT_FILENO) ? "1" : "0", 1);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  execvp("mpirun", cargs.data());
  BIGBATCH_THROW(IoError,
                 "cannot start mpirun for {} workers: {}; install openmpi-bin (scripts/setup) or "
                 "run with --workers 1",
                 workers, std::strerror(errno));
}

}  // namespace bigbatch
