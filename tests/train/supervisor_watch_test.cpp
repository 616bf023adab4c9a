// A rank ends itself when its supervisor is gone (supervisor_watch.h): a
// fake supervisor process and a fake rank watching it; the supervisor is
// SIGKILLed, and the rank exits with status 1 on its own. A supervisor on
// another host, or none, is not watched.
#include "watch/supervisor_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "bigbatch/common/process_start.h"
#include "bigbatch/common/supervision_env.h"

namespace bigbatch::train_detail {
namespace {

std::string hostName() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// The child's exit status within 10 s; -1 if it is still running (killed).
int exitStatusWithin10s(pid_t child) {
  for (int i = 0; i < 1000; ++i) {
    int status = 0;
    if (waitpid(child, &status, WNOHANG) == child) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  return -1;
}

TEST(SupervisorWatch, ARankEndsItselfWhenItsSupervisorIsGone) {
  const pid_t supervisor = fork();
  ASSERT_GE(supervisor, 0);
  if (supervisor == 0) {
    for (;;) pause();
  }
  const std::string identity = hostName() + ":" + std::to_string(supervisor) + ":" +
                               processStartTime(supervisor);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t rank = fork();
  ASSERT_GE(rank, 0);
  if (rank == 0) {
    setenv(kSupervisorEnv, identity.c_str(), 1);
    auto watch = SupervisorWatch::fromEnvironment();
    const char c = watch ? 'w' : 'n';
    (void)!write(ready[1], &c, 1);
    for (;;) pause();  // only the watch ends it
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(c, 'w') << "the rank did not watch its supervisor";
  kill(supervisor, SIGKILL);
  waitpid(supervisor, nullptr, 0);
  EXPECT_EQ(exitStatusWithin10s(rank), 1);
  close(ready[0]);
  close(ready[1]);
}

TEST(SupervisorWatch, NoneWhereTheSupervisorIsOnAnotherHostOrNotSet) {
  unsetenv(kSupervisorEnv);
  EXPECT_EQ(SupervisorWatch::fromEnvironment(), nullptr);
  setenv(kSupervisorEnv, ("another-host:" + std::to_string(getpid()) + ":1").c_str(), 1);
  EXPECT_EQ(SupervisorWatch::fromEnvironment(), nullptr);
  unsetenv(kSupervisorEnv);
}

}  // namespace
}  // namespace bigbatch::train_detail
