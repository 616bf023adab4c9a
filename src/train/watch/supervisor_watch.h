// A rank of a supervised job (bigbatch train --max-restarts) ends itself
// when its supervisor is gone — killed with SIGKILL, by the OOM killer —
// so that no rank keeps a port, a shared-memory window or a GPU after it.
// The supervisor names itself in BIGBATCH_SUPERVISOR ("HOST:PID:START",
// common/supervision_env.h); a rank on that host watches that process (a
// pidfd, so the wait costs nothing) and, when it exits, prints why to
// stderr and _exit()s with status 1. Ranks on other hosts are ended by
// their MPI daemon once mpirun is gone (mpirun itself gets SIGTERM when the
// supervisor dies: PR_SET_PDEATHSIG, src/launch/supervise_workers.cpp).
//
// Internal to src/train. Threading: one watcher thread, stopped and joined
// by the destructor.
#pragma once

#include <memory>
#include <string>
#include <thread>

namespace bigbatch::train_detail {

class SupervisorWatch {
 public:
  // Starts watching when BIGBATCH_SUPERVISOR names a process of this host
  // that is still the one it names; nullptr otherwise (no supervisor, one
  // on another host, or a malformed value).
  static std::unique_ptr<SupervisorWatch> fromEnvironment();
  ~SupervisorWatch();
  SupervisorWatch(const SupervisorWatch&) = delete;
  SupervisorWatch& operator=(const SupervisorWatch&) = delete;

 private:
  SupervisorWatch(int pidfd, int stopFd, std::string who);
  void watch();

  int pidfd_;
  int stopFd_;  // an eventfd: the destructor's stop
  std::string who_;
  std::thread thread_;
};

}  // namespace bigbatch::train_detail
