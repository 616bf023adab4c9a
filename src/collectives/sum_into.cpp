// The reduction kernel of the collectives. Plain loops on purpose: it runs on
// the communication thread and must not enter libtorch's OpenMP pool, which
// belongs to the compute thread (an ATen add_ on a multi-MB buffer would).
// fp16 goes through half_kernels.h (F16C where the processor has it); bf16
// through c10::BFloat16's scalar rounding.
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cstring>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/common/error.h"
#include "half_kernels.h"

namespace bigbatch {
namespace {

template <typename T>
void sumLowPrecision(void* dst, const void* src, size_t count) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < count; ++i) d[i] = T(static_cast<float>(d[i]) + static_cast<float>(s[i]));
}

template <typename T>
void sumPlain(void* dst, const void* src, size_t count) {
  T* __restrict d = static_cast<T*>(dst);
  const T* __restrict s = static_cast<const T*>(src);
  for (size_t i = 0; i < count; ++i) d[i] += s[i];
}

// How a 16-bit type goes into and out of sumManyLowPrecision's fp32
// accumulator: bf16 by c10's scalar rounding, fp16 by half_kernels (F16C
// where the processor has it).
struct BFloat16Lanes {
  using T = c10::BFloat16;
  static void load(float* acc, const T* s, size_t n) {
    for (size_t i = 0; i < n; ++i) acc[i] = static_cast<float>(s[i]);
  }
  static void add(float* acc, const T* s, size_t n) {
    for (size_t i = 0; i < n; ++i) acc[i] += static_cast<float>(s[i]);
  }
  static void store(T* d, const float* acc, size_t n) {
    for (size_t i = 0; i < n; ++i) d[i] = T(acc[i]);
  }
};

struct HalfLanes {
  using T = uint16_t;
  static void load(float* acc, const T* s, size_t n) { half_kernels::unpack(acc, s, n, 1.0f); }
  static void add(float* acc, const T* s, size_t n) { half_kernels::accumulate(acc, s, n); }
  static void store(T* d, const float* acc, size_t n) { half_kernels::pack(d, acc, n, 1.0f); }
};

// dst = srcs[0] + ... + srcs[n-1] in rank order, accumulated in fp32 and
// rounded once; blocked so the accumulator stays in L1.
template <typename Lanes>
void sumManyLowPrecision(void* dst, const void* const* srcs, int n, size_t count) {
  using T = typename Lanes::T;
  constexpr size_t kBlock = 2048;
  float acc[kBlock];
  T* d = static_cast<T*>(dst);
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t len = std::min(kBlock, count - base);
    Lanes::load(acc, static_cast<const T*>(srcs[0]) + base, len);
    for (int j = 1; j < n; ++j) Lanes::add(acc, static_cast<const T*>(srcs[j]) + base, len);
    Lanes::store(d + base, acc, len);
  }
}

template <typename T>
void sumManyPlain(void* dst, const void* const* srcs, int n, size_t count) {
  T* __restrict d = static_cast<T*>(dst);
  const T* __restrict a = static_cast<const T*>(srcs[0]);
  if (n == 1) {
    std::memcpy(d, a, count * sizeof(T));
    return;
  }
  const T* __restrict b = static_cast<const T*>(srcs[1]);
  if (n == 2) {
    for (size_t i = 0; i < count; ++i) d[i] = a[i] + b[i];
    return;
  }
  // Rank order is kept (((s0 + s1) + s2) + ...) so every rank that reduces a
  // slice produces the same bits; blocked so the partial sums stay in cache.
  constexpr size_t kBlock = 4096;
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t len = std::min(kBlock, count - base);
    T* __restrict db = d + base;
    const T* __restrict ab = a + base;
    const T* __restrict bb = b + base;
    for (size_t i = 0; i < len; ++i) db[i] = ab[i] + bb[i];
    for (int j = 2; j < n; ++j) {
      const T* __restrict s = static_cast<const T*>(srcs[j]) + base;
      for (size_t i = 0; i < len; ++i) db[i] += s[i];
    }
  }
}

}  // namespace

void sumMany(DataType type, void* dst, const void* const* srcs, int n, size_t count) {
  switch (type) {
    case DataType::kFloat32: return sumManyPlain<float>(dst, srcs, n, count);
    case DataType::kBFloat16: return sumManyLowPrecision<BFloat16Lanes>(dst, srcs, n, count);
    case DataType::kFloat16: return sumManyLowPrecision<HalfLanes>(dst, srcs, n, count);
    case DataType::kInt64: return sumManyPlain<int64_t>(dst, srcs, n, count);
    case DataType::kUInt8: return sumManyPlain<uint8_t>(dst, srcs, n, count);
    case DataType::kFloat64: return sumManyPlain<double>(dst, srcs, n, count);
  }
  BIGBATCH_THROW(InvalidArgument, "sumMany: unknown type {}", static_cast<int>(type));
}

void packFloats(DataType type, void* out, const float* in, size_t count, float scale) {
  switch (type) {
    case DataType::kFloat32: {
      auto* o = static_cast<float*>(out);
      for (size_t i = 0; i < count; ++i) o[i] = in[i] * scale;
      return;
    }
    case DataType::kFloat16:
      return half_kernels::pack(static_cast<uint16_t*>(out), in, count, scale);
    case DataType::kBFloat16: {
      auto* o = static_cast<c10::BFloat16*>(out);
      for (size_t i = 0; i < count; ++i) o[i] = c10::BFloat16(in[i] * scale);
      return;
    }
    default: break;
  }
  BIGBATCH_THROW(InvalidArgument, "packFloats: {} is not a float type", dataTypeName(type));
}

void unpackFloats(DataType type, float* out, const void* in, size_t count, float scale) {
  switch (type) {
    case DataType::kFloat32: {
      const auto* p = static_cast<const float*>(in);
      for (size_t i = 0; i < count; ++i) out[i] = p[i] * scale;
      return;
    }
    case DataType::kFloat16:
      return half_kernels::unpack(out, static_cast<const uint16_t*>(in), count, scale);
    case DataType::kBFloat16: {
      const auto* p = static_cast<const c10::BFloat16*>(in);
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<float>(p[i]) * scale;
      return;
    }
    default: break;
  }
  BIGBATCH_THROW(InvalidArgument, "unpackFloats: {} is not a float type", dataTypeName(type));
}

void sumInto(DataType type, void* dst, const void* src, size_t count) {
  switch (type) {
    case DataType::kFloat32: return sumPlain<float>(dst, src, count);
    case DataType::kBFloat16: return sumLowPrecision<c10::BFloat16>(dst, src, count);
    case DataType::kFloat16:
      return half_kernels::sum(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count);
    case DataType::kInt64: return sumPlain<int64_t>(dst, src, count);
    case DataType::kUInt8: return sumPlain<uint8_t>(dst, src, count);
    case DataType::kFloat64: return sumPlain<double>(dst, src, count);
  }
  BIGBATCH_THROW(InvalidArgument, "sumInto: unknown type {}", static_cast<int>(type));
}

}  // namespace bigbatch
