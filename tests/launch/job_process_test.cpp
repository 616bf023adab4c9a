// How the launcher and the supervisor start mpirun (job_process.h): the job
// ends when the process that started it is SIGKILLed — the kernel's
// parent-death signal alone, no other watch involved — and a command that
// cannot be run says so, with the fix, through the stderr pipe.
#include "job_process.h"

#include "failure_reader.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace bigbatch::launch_detail {
namespace {

// Reaps `pid` within `seconds`; its wait status, or -1.
int reapWithin(pid_t pid, int seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < until) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

// The first word of /proc/PID/cmdline.
std::string commandOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string first;
  std::getline(in, first, '\0');
  return first;
}

TEST(JobProcess, TheJobGetsSigtermWhenItsStarterIsKilled) {
  // The job, orphaned, becomes this process's child: its end is seen here.
  int wasSubreaper = 0;
  prctl(PR_GET_CHILD_SUBREAPER, &wasSubreaper);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t starter = fork();
  ASSERT_GE(starter, 0);
  if (starter == 0) {
    sigset_t none;
    sigemptyset(&none);
    const JobProcess job = startJobProcess({"sleep", "600"}, none, "no fix");
    (void)!write(fds[1], &job.pid, sizeof job.pid);
    pause();
    _exit(0);
  }
  pid_t job = -1;
  ASSERT_EQ(read(fds[0], &job, sizeof job), static_cast<ssize_t>(sizeof job));
  ::close(fds[0]);
  ::close(fds[1]);
  // Once the job runs `sleep` its parent-death signal is set (it is set
  // before the exec); killed earlier, the starter would be seen gone by the
  // child's own check instead.
  for (int i = 0; i < 1000 && commandOf(job) != "sleep"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(commandOf(job), "sleep") << "the job never ran its command";
  kill(starter, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(starter, &status, 0), starter);
  status = reapWithin(job, 10);
  if (status == -1) kill(job, SIGKILL);
  prctl(PR_SET_CHILD_SUBREAPER, wasSubreaper);
  ASSERT_NE(status, -1) << "the job outlived its starter by 10 s";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "wait status " << status;
}

TEST(JobProcess, ACommandThatCannotRunSaysWhyAndTheFix) {
  sigset_t none;
  sigemptyset(&none);
  const JobProcess job =
      startJobProcess({"/nonexistent/mpirun", "-np", "2"}, none, "install openmpi-bin");
  std::string said;
  char buf[256];
  for (ssize_t n; (n = read(job.stderrFd, buf, sizeof buf)) > 0;) said.append(buf, static_cast<size_t>(n));
  ::close(job.stderrFd);
  int status = 0;
  ASSERT_EQ(waitpid(job.pid, &status, 0), job.pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 127);
  EXPECT_NE(said.find("bigbatch: error: cannot start '/nonexistent/mpirun': No such file or "
                      "directory; install openmpi-bin"),
            std::string::npos)
      << said;
}

}  // namespace
}  // namespace bigbatch::launch_detail

namespace bigbatch::launch_detail {
namespace {

// What the launcher's stderr says about the rank that died, passed on to
// ours as it comes: mpirun's words and srun's (--launcher srun).
std::pair<int, std::string> namedIn(const std::string& text) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  FailureReader reader(fds[0]);
  EXPECT_EQ(::write(fds[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fds[1]);
  reader.finish();
  return {reader.rank(), reader.host()};
}

TEST(FailureReader, NamesTheRankMpirunOrSrunSaysDied) {
  EXPECT_EQ(namedIn("mpirun noticed that process rank 1 with PID 77 on node 10.0.0.2 exited on "
                    "signal 9 (Killed).\n"),
            std::make_pair(1, std::string("10.0.0.2")));
  EXPECT_EQ(namedIn("srun: launch/slurm: _step_signal: Terminating StepId=3.0\n"
                    "srun: error: node8: task 3: Killed\n"
                    "srun: error: node7: tasks 0-2: Terminated\n"),
            std::make_pair(3, std::string("node8")));
  // srun's line for the tasks it ended itself may come first.
  EXPECT_EQ(namedIn("srun: error: node7: tasks 0-2: Terminated\n"
                    "srun: error: node8: task 3: Exited with exit code 1\n"),
            std::make_pair(3, std::string("node8")));
  EXPECT_EQ(namedIn("bigbatch: error: [rank 2] rank 1 failed: injected fault\n").first, 1);
  EXPECT_EQ(namedIn("nothing about a rank\n").first, -1);
}

}  // namespace
}  // namespace bigbatch::launch_detail
