#include "process_env.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace bigbatch {

void ensureProcessEnvironment(int argc, char** argv) {
  (void)argc;
  if (std::getenv("BIGBATCH_ENV_APPLIED") != nullptr) return;
  setenv("BIGBATCH_ENV_APPLIED", "1", 1);
  // OpenBLAS (pthread build) would start its own thread pool beside libtorch's
  // OpenMP pool and the two would fight for the cores; libtorch parallelises
  // above BLAS, so BLAS runs single-threaded.
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  execv("/proc/self/exe", argv);
  // execv only returns on failure: carry on in this process, untuned.
}

}  // namespace bigbatch
