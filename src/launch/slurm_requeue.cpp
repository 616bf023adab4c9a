#include "bigbatch/launch/slurm_requeue.h"

#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bigbatch/common/stop_request.h"

extern char** environ;

namespace bigbatch {

int endStoppedJob() {
  const char* job = std::getenv("SLURM_JOB_ID");
  if (job == nullptr || *job == '\0') {
    std::fprintf(stderr,
                 "bigbatch: the job stopped on request (SIGUSR1) at a checkpoint; continue it "
                 "with --resume auto (exit status %d)\n",
                 kStoppedExitStatus);
    return kStoppedExitStatus;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::string id = job;
  char program[] = "scontrol", verb[] = "requeue";
  char* argv[] = {program, verb, id.data(), nullptr};
  pid_t pid = -1;
  int status = 0;
  const int spawned = posix_spawnp(&pid, "scontrol", nullptr, nullptr, argv, environ);
  if (spawned == 0) {
    pid_t waited = -1;
    while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (waited < 0) status = 1 << 8;  // a requeue nobody saw succeed did not
  }
  if (spawned != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr,
                 "bigbatch: the job stopped on request (SIGUSR1) at a checkpoint, but `scontrol "
                 "requeue %s` %s; requeue it yourself (the job needs --requeue, or the "
                 "cluster JobRequeue=1), or submit it again: --resume auto continues it\n",
                 job,
                 spawned != 0 ? (std::string("could not start: ") + std::strerror(spawned)).c_str()
                              : "failed (its message above)");
    return kStoppedExitStatus;
  }
  std::fprintf(stderr,
               "bigbatch: the job stopped on request (SIGUSR1) at a checkpoint and Slurm job %s "
               "is requeued: its script starts again and --resume auto continues the run\n",
               job);
  return 0;
}

}  // namespace bigbatch
