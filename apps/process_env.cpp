#include "process_env.h"

#include <dlfcn.h>

#include <cstdlib>

namespace bigbatch {

void ensureProcessEnvironment() {
  if (std::getenv("OPENBLAS_NUM_THREADS") != nullptr) return;  // the user's choice
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  // Not a re-exec with the variable set: that loaded libtorch twice, 0.7 s
  // on every start of the binary (each rank's too).
  using SetThreads = void (*)(int);
  if (auto* set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(1);
  }
}

}  // namespace bigbatch
