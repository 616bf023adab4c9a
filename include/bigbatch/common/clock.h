// The steady clock as int64 nanoseconds: a value that fits an std::atomic
// and that processes of one host compare (shared-memory heartbeats).
// Pure; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>

namespace bigbatch {

inline int64_t steadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace bigbatch
