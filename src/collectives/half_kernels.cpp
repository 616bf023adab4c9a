#include "half_kernels.h"

#include <c10/util/Half.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define BIGBATCH_HAVE_F16C_PATH 1
#endif

namespace bigbatch::half_kernels {
namespace {

uint16_t toHalf(float v) { return c10::Half(v).x; }
float fromHalf(uint16_t h) { return static_cast<float>(c10::Half(h, c10::Half::from_bits())); }

#if BIGBATCH_HAVE_F16C_PATH
#define BIGBATCH_F16C __attribute__((target("avx,f16c")))
constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

BIGBATCH_F16C size_t packF16c(uint16_t* out, const float* in, size_t count, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(in + i), s);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(v, kRound));
  }
  return i;
}

BIGBATCH_F16C size_t unpackF16c(float* out, const uint16_t* in, size_t count, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v, s));
  }
  return i;
}

BIGBATCH_F16C size_t accumulateF16c(float* acc, const uint16_t* in, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), v));
  }
  return i;
}

BIGBATCH_F16C size_t sumF16c(uint16_t* dst, const uint16_t* src, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    auto* d = reinterpret_cast<__m128i*>(dst + i);
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(d));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm_storeu_si128(d, _mm256_cvtps_ph(_mm256_add_ps(a, b), kRound));
  }
  return i;
}

// Read while static objects are constructed, hence the explicit init (GCC:
// __builtin_cpu_supports before constructors needs __builtin_cpu_init).
const bool kF16c = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
}();
#else
const bool kF16c = false;
#endif

}  // namespace

// Each function: the vector loop where F16C is there, then the scalar
// loop over what it left (the tail, or everything).
void pack(uint16_t* out, const float* in, size_t count, float scale) {
  size_t i = 0;
#if BIGBATCH_HAVE_F16C_PATH
  if (kF16c) i = packF16c(out, in, count, scale);
#endif
  for (; i < count; ++i) out[i] = toHalf(in[i] * scale);
}

void unpack(float* out, const uint16_t* in, size_t count, float scale) {
  size_t i = 0;
#if BIGBATCH_HAVE_F16C_PATH
  if (kF16c) i = unpackF16c(out, in, count, scale);
#endif
  for (; i < count; ++i) out[i] = fromHalf(in[i]) * scale;
}

void accumulate(float* acc, const uint16_t* in, size_t count) {
  size_t i = 0;
#if BIGBATCH_HAVE_F16C_PATH
  if (kF16c) i = accumulateF16c(acc, in, count);
#endif
  for (; i < count; ++i) acc[i] += fromHalf(in[i]);
}

void sum(uint16_t* dst, const uint16_t* src, size_t count) {
  size_t i = 0;
#if BIGBATCH_HAVE_F16C_PATH
  if (kF16c) i = sumF16c(dst, src, count);
#endif
  for (; i < count; ++i) dst[i] = toHalf(fromHalf(dst[i]) + fromHalf(src[i]));
}

}  // namespace bigbatch::half_kernels
