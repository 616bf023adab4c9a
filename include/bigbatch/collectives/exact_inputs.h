// Rank-derived allreduce inputs whose sums are exact in every supported type
// (Gloo's approach): element i on rank r is (i % 7) + r, at most 6 + 7 = 13,
// so sums over up to 8 ranks stay below 2^8 and are exact even in bfloat16.
// Used by the tests and by `bigbatch bench allreduce` to count wrong
// elements with ==. Pure; thread-safe.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstring>
#include <string>
#include <vector>

#include "bigbatch/comm/communicator.h"

namespace bigbatch::exact {

inline float inputValue(size_t i, int rank) { return static_cast<float>(i % 7 + rank); }
inline float expectedSum(size_t i, int n) {
  return static_cast<float>(n * (i % 7) + n * (n - 1) / 2);
}

inline std::vector<uint8_t> makeInput(DataType type, size_t count, int rank) {
  std::vector<uint8_t> buf(count * elementSize(type));
  for (size_t i = 0; i < count; ++i) {
    const float v = inputValue(i, rank);
    if (type == DataType::kFloat32) reinterpret_cast<float*>(buf.data())[i] = v;
    if (type == DataType::kFloat16) reinterpret_cast<c10::Half*>(buf.data())[i] = c10::Half(v);
    if (type == DataType::kBFloat16) reinterpret_cast<c10::BFloat16*>(buf.data())[i] = c10::BFloat16(v);
  }
  return buf;
}

inline float readValue(DataType type, const std::vector<uint8_t>& buf, size_t i) {
  if (type == DataType::kFloat16) return static_cast<float>(reinterpret_cast<const c10::Half*>(buf.data())[i]);
  if (type == DataType::kBFloat16) return static_cast<float>(reinterpret_cast<const c10::BFloat16*>(buf.data())[i]);
  return reinterpret_cast<const float*>(buf.data())[i];
}

// Number of wrong elements (compared with ==); `firstWrong` describes the first.
inline size_t countWrong(DataType type, const std::vector<uint8_t>& buf, size_t count, int n,
                         std::string* firstWrong) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    const float got = readValue(type, buf, i), want = expectedSum(i, n);
    if (got != want) {
      if (wrong++ == 0 && firstWrong) {
        *firstWrong = "index " + std::to_string(i) + ": got " + std::to_string(got) + ", want " +
                      std::to_string(want);
      }
    }
  }
  return wrong;
}

}  // namespace bigbatch::exact
