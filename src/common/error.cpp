#include "bigbatch/common/error.h"

#include <atomic>

namespace bigbatch {
namespace {
std::atomic<int> gRank{0};
// In-process groups run several ranks as threads of one process: a thread
// that set its own rank reports it; others fall back to the process's.
thread_local int tRank = -1;
}  // namespace

void setErrorRank(int rank) { gRank.store(rank); }
void setThreadErrorRank(int rank) { tRank = rank; }
int errorRank() { return tRank >= 0 ? tRank : gRank.load(); }

namespace detail {
std::string withRank(const std::string& msg) {
  return fmt::format("[rank {}] {}", errorRank(), msg);
}
}  // namespace detail
}  // namespace bigbatch
