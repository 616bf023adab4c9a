// FNV-1a, 64-bit (Fowler, Noll, Vo): a fast, stable hash of bytes for the
// checks where ranks compare what they hold (config, initial weights) —
// not cryptographic. Pure; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bigbatch {

inline constexpr uint64_t kFnv1aOffset = 1469598103934665603ULL;

// Continues `h` over `bytes` bytes at `data`; start with kFnv1aOffset.
inline uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = kFnv1aOffset) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

}  // namespace bigbatch
