// PowerSGD's modified Gram-Schmidt on CUDA (orthogonalise_cuda.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "orthogonalise_cuda.h"

namespace bigbatch::ddp_detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPerLaunch = 64;  // factors per launch: the table travels as a kernel argument

struct FactorTable {
  PackedFactor factor[kPerLaunch];
};

// Sums each thread's `n` values over the block in a fixed order (each warp
// by shuffles, then the warps in order); every thread reads the totals from
// `total[0..n)` after the call.
__device__ void blockSums(const double* local, int n, double (*perWarp)[kWarps], double* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int k = 0; k < n; ++k) {
    double v = local[k];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) perWarp[k][warp] = v;
  }
  __syncthreads();
  if (threadIdx.x < n) {
    double s = 0;
    for (int w = 0; w < kWarps; ++w) s += perWarp[threadIdx.x][w];
    total[threadIdx.x] = s;
  }
  __syncthreads();
}

// One block per factor: copy into double, then for each column c its
// squared norm, the column scaled to unit length (or zeroed where nothing
// is left of it), its dot with every later column, and those projected
// out; the result back in fp32.
__global__ void orthogonaliseKernel(FactorTable table, float* packed, double* scratch) {
  __shared__ double perWarp[kMaxCudaOrthogonaliseRank][kWarps];
  __shared__ double original[kMaxCudaOrthogonaliseRank];
  __shared__ double sums[kMaxCudaOrthogonaliseRank];
  const PackedFactor f = table.factor[blockIdx.x];
  const int r = f.rank;
  float* p = packed + f.offset;
  double* t = scratch + f.offset;
  double local[kMaxCudaOrthogonaliseRank];

  for (int k = 0; k < r; ++k) local[k] = 0;
  for (int64_t i = threadIdx.x; i < f.rows; i += kThreads) {
    for (int k = 0; k < r; ++k) {
      const double v = p[i * r + k];
      t[i * r + k] = v;
      local[k] += v * v;
    }
  }
  blockSums(local, r, perWarp, original);

  for (int c = 0; c < r; ++c) {
    double norm2 = 0;
    for (int64_t i = threadIdx.x; i < f.rows; i += kThreads) norm2 += t[i * r + c] * t[i * r + c];
    local[0] = norm2;
    blockSums(local, 1, perWarp, sums);
    norm2 = sums[0];
    const double scale = norm2 > original[c] * 1e-18 && norm2 > 0 ? 1.0 / sqrt(norm2) : 0.0;
    const int later = r - c - 1;
    for (int k = 0; k < later; ++k) local[k] = 0;
    for (int64_t i = threadIdx.x; i < f.rows; i += kThreads) {
      const double v = t[i * r + c] * scale;
      t[i * r + c] = v;
      for (int k = 0; k < later; ++k) local[k] += t[i * r + c + 1 + k] * v;
    }
    if (later == 0) break;
    blockSums(local, later, perWarp, sums);
    for (int64_t i = threadIdx.x; i < f.rows; i += kThreads) {
      const double v = t[i * r + c];
      for (int k = 0; k < later; ++k) t[i * r + c + 1 + k] -= sums[k] * v;
    }
    __syncthreads();
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < f.rows * r; i += kThreads) p[i] = static_cast<float>(t[i]);
}

}  // namespace

void orthogonaliseFactorsCuda(float* packed, double* scratch,
                              const std::vector<PackedFactor>& factors, void* stream) {
  for (size_t first = 0; first < factors.size(); first += kPerLaunch) {
    FactorTable table{};
    const size_t count = std::min(factors.size() - first, static_cast<size_t>(kPerLaunch));
    for (size_t k = 0; k < count; ++k) {
      if (factors[first + k].rank < 1 || factors[first + k].rank > kMaxCudaOrthogonaliseRank) {
        throw std::runtime_error("PowerSGD orthogonalisation: rank " +
                                 std::to_string(factors[first + k].rank) + " outside 1.." +
                                 std::to_string(kMaxCudaOrthogonaliseRank));
      }
      table.factor[k] = factors[first + k];
    }
    orthogonaliseKernel<<<static_cast<unsigned>(count), kThreads, 0,
                          static_cast<cudaStream_t>(stream)>>>(table, packed, scratch);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      throw std::runtime_error(std::string("PowerSGD orthogonalisation: ") + cudaGetErrorString(e));
    }
  }
}

}  // namespace bigbatch::ddp_detail
