// The binary's process settings: OpenBLAS single-threaded in this process
// (its pool already started when the library loaded) and in every child,
// unless the user chose OPENBLAS_NUM_THREADS.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "process_env.h"

namespace bigbatch {
namespace {

using SetThreads = void (*)(int);
using GetThreads = int (*)();

TEST(ProcessEnvironment, OpenBlasRunsOneThreadHereAndInChildren) {
  auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (!set || !get) GTEST_SKIP() << "this libtorch's BLAS is not OpenBLAS: no pool to size";
  const char* before = std::getenv("OPENBLAS_NUM_THREADS");
  const std::string saved = before ? before : "";

  unsetenv("OPENBLAS_NUM_THREADS");
  set(2);  // what OpenBLAS starts with on a machine of 2 or more cores
  ensureProcessEnvironment();
  EXPECT_EQ(get(), 1);
  ASSERT_NE(std::getenv("OPENBLAS_NUM_THREADS"), nullptr);
  EXPECT_STREQ(std::getenv("OPENBLAS_NUM_THREADS"), "1");

  // The user's setting holds: OpenBLAS read it at load; children inherit it.
  setenv("OPENBLAS_NUM_THREADS", "2", 1);
  set(2);
  ensureProcessEnvironment();
  EXPECT_EQ(get(), 2);
  EXPECT_STREQ(std::getenv("OPENBLAS_NUM_THREADS"), "2");

  if (before) {
    setenv("OPENBLAS_NUM_THREADS", saved.c_str(), 1);
  } else {
    unsetenv("OPENBLAS_NUM_THREADS");
  }
  set(1);
}

}  // namespace
}  // namespace bigbatch
