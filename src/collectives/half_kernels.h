// fp16 conversions and sums for the collectives' 16-bit wire, with the
// x86 F16C instructions where the processor has them (vcvtps2ph, round to
// nearest even: the bits of c10::Half's software conversion for every
// non-NaN value; a NaN stays a NaN, its payload may differ) and c10::Half's
// scalar code elsewhere. On the 2-core project machine the scalar loops
// took ~3–6 ns a value, which for a 26 M-parameter model is over 100 ms of
// pack and unpack a step (bench/device_codec_bench, host fp16 row).
//
// Plain loops, no ATen: they run on the communication thread, which must
// not enter libtorch's OpenMP pool (sum_into.cpp). Pure; thread-safe.
// Internal to src/collectives.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bigbatch::half_kernels {

// out[i] = half(in[i] * scale)
void pack(uint16_t* out, const float* in, size_t count, float scale);
// out[i] = float(in[i]) * scale
void unpack(float* out, const uint16_t* in, size_t count, float scale);
// acc[i] += float(in[i])
void accumulate(float* acc, const uint16_t* in, size_t count);
// dst[i] = half(float(dst[i]) + float(src[i]))
void sum(uint16_t* dst, const uint16_t* src, size_t count);

}  // namespace bigbatch::half_kernels
