// PowerSGD's orthogonalisation of the P factors on a CUDA device in one
// launch per bucket (device_powersgd_codec.h): the ATen version is ~10
// small launches per factor column, and with ResNet-50's 54 compressed
// matrices at rank 4 that host-side launch work was most of the codec's
// 46 ms a step on an H200 (bench/device_codec_bench.cpp, 2026-12-04).
// Each matrix gets one block, which runs the codec's modified Gram-Schmidt
// in double — the same rule, including the zeroed column where nothing is
// left (under 1e-9 of its norm) — with fixed-order block reductions, so
// identical inputs give identical bits.
//
// Plain C++ interface (no CUDA or torch header), so code compiled by g++
// against either libtorch can call it. Threading: any thread; the work is
// enqueued on `stream`.
#pragma once

#include <cstdint>
#include <vector>

namespace bigbatch::ddp_detail {

// A rows x rank row-major fp32 matrix at `offset` floats into the packed
// factors.
struct PackedFactor {
  int64_t offset;
  int64_t rows;
  int rank;
};

// The largest rank the kernel takes (the codec falls back to ATen above it).
inline constexpr int kMaxCudaOrthogonaliseRank = 32;

// Orthonormalises the columns of every factor in place. `scratch`: device
// doubles, as many as the packed factors' floats (offset + rows * rank of
// the last). `stream`: a cudaStream_t. Throws std::runtime_error naming
// the CUDA error of a failed launch.
void orthogonaliseFactorsCuda(float* packed, double* scratch,
                              const std::vector<PackedFactor>& factors, void* stream);

}  // namespace bigbatch::ddp_detail
