// What the CLI tests share: running the bigbatch binary as a user does,
// and mpirun as root. BIGBATCH_BINARY and BIGBATCH_MPIRUN come from the
// test's compile definitions (tests/apps/CMakeLists.txt).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>
#include <utility>

struct Outcome {
  int status;
  std::string output;
};

// The output of a shell command; `status` gets pclose's wait status.
inline std::string capture(const std::string& cmd, int& status) {
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  status = pclose(pipe);
  return out;
}

// Runs the bigbatch binary with `args`, capturing stdout and stderr together
// (or stdout alone: `stderrToo` = false).
inline Outcome run(const std::string& args, bool stderrToo = true) {
  int status = 0;
  std::string out =
      capture(std::string(BIGBATCH_BINARY) + " " + args + (stderrToo ? " 2>&1" : ""), status);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, std::move(out)};
}

// mpirun -np N of the binary, as root too.
inline std::string underMpirun(int ranks) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " + std::string(BIGBATCH_MPIRUN) +
         " --oversubscribe --bind-to none -np " + std::to_string(ranks) + " ";
}
