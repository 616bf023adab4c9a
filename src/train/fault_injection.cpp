#include "fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "bigbatch/common/error.h"

namespace bigbatch::train_detail {

void injectFault(const std::string& kind, int rank, int64_t step) {
  std::fprintf(stderr, "bigbatch: injecting fault '%s' on rank %d at step %lld\n", kind.c_str(),
               rank, static_cast<long long>(step));
  std::fflush(stderr);
  if (kind == "nan" || kind == "nan_input") return;
  if (kind == "abort") std::abort();
  if (kind == "sigkill") std::raise(SIGKILL);
  if (kind == "hang") {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  BIGBATCH_THROW(Error, "injected fault (fault.kind = throw) on rank {} at step {}", rank, step);
}

}  // namespace bigbatch::train_detail
