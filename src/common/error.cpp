#include "bigbatch/common/error.h"

#include <atomic>

namespace bigbatch {
namespace {
std::atomic<int> gRank{0};
}  // namespace

void setErrorRank(int rank) { gRank.store(rank); }
int errorRank() { return gRank.load(); }

namespace detail {
std::string withRank(const std::string& msg) {
  return fmt::format("[rank {}] {}", gRank.load(), msg);
}
}  // namespace detail
}  // namespace bigbatch
