#include "low_rank_kernels.h"

#include <algorithm>

namespace bigbatch::ddp_detail::low_rank {
namespace {

// Columns a pass works on at a time: a block of a row, of q^T and of the
// sums stays in the first-level cache for every k.
constexpr int64_t kBlock = 1024;
constexpr int kLanes = 16;

}  // namespace

#define BIGBATCH_MULTIVERSION __attribute__((target_clones("avx2", "default")))

// Sixteen independent float lanes per block of a row, so the loop
// vectorises without -ffast-math; each block's lanes are folded in a fixed
// order into a double sum.
BIGBATCH_MULTIVERSION
void foldAndProject(float* __restrict x, const float* __restrict g, int64_t rows, int64_t cols,
                    const float* __restrict qt, int rank, float* __restrict p) {
  std::vector<double> totals(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rows; ++i) {
    float* xi = x + i * cols;
    std::fill(totals.begin(), totals.end(), 0.0);
    for (int64_t j0 = 0; j0 < cols; j0 += kBlock) {
      const int64_t j1 = std::min(cols, j0 + kBlock);
      if (g) {
        const float* gi = g + i * cols;
        for (int64_t j = j0; j < j1; ++j) xi[j] += gi[j];
      }
      for (int k = 0; k < rank; ++k) {
        const float* qk = qt + k * cols;
        float l[kLanes] = {};
        int64_t j = j0;
        for (; j + kLanes <= j1; j += kLanes) {
          for (int t = 0; t < kLanes; ++t) l[t] += xi[j + t] * qk[j + t];
        }
        for (int t = 0; j < j1; ++j, ++t) l[t] += xi[j] * qk[j];
        for (int w = kLanes / 2; w > 0; w /= 2) {
          for (int t = 0; t < w; ++t) l[t] += l[t + w];
        }
        totals[k] += l[0];
      }
    }
    for (int k = 0; k < rank; ++k) p[i * rank + k] = static_cast<float>(totals[k]);
  }
}

// By blocks of columns: each block's rank x kBlock float sums stay in the
// cache while kRowsPerSum rows add to them, then go into double sums.
BIGBATCH_MULTIVERSION
void projectBack(const float* __restrict x, int64_t rows, int64_t cols,
                 const float* __restrict p, int rank, float* __restrict q,
                 std::vector<double>& work) {
  constexpr int64_t kRowsPerSum = 64;
  // The sums of a block are `stride` = min(kBlock, cols) apart, not kBlock:
  // a narrow matrix (the 350000 x 64 of the benchmarks) then clears and
  // folds only the columns it has, not all kBlock every kRowsPerSum rows.
  // The sums and their order are unchanged; at rank 2 the pass took
  // 6.1-7.9 ms against 9.0-10.4 (low_rank_kernels_bench, 1 thread,
  // 2026-12-05, the two builds in an interleaved pair of runs).
  const int64_t stride = std::min(kBlock, cols);
  work.resize(static_cast<size_t>(rank * stride));
  double* __restrict totals = work.data();
  std::vector<float> partial(static_cast<size_t>(rank * stride));
  float* __restrict sums = partial.data();
  for (int64_t j0 = 0; j0 < cols; j0 += kBlock) {
    const int64_t width = std::min(kBlock, cols - j0);
    std::fill(work.begin(), work.end(), 0.0);
    for (int64_t i0 = 0; i0 < rows; i0 += kRowsPerSum) {
      const int64_t i1 = std::min(rows, i0 + kRowsPerSum);
      std::fill(partial.begin(), partial.end(), 0.0f);
      for (int64_t i = i0; i < i1; ++i) {
        const float* xi = x + i * cols + j0;
        for (int k = 0; k < rank; ++k) {
          const float a = p[i * rank + k];
          float* s = sums + k * stride;
          for (int64_t j = 0; j < width; ++j) s[j] += xi[j] * a;
        }
      }
      for (int k = 0; k < rank; ++k) {
        for (int64_t j = 0; j < width; ++j) totals[k * stride + j] += sums[k * stride + j];
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      for (int k = 0; k < rank; ++k)
        q[(j0 + j) * rank + k] = static_cast<float>(totals[k * stride + j]);
    }
  }
}

BIGBATCH_MULTIVERSION
void reconstruct(float* __restrict m, float* __restrict e, int64_t rows, int64_t cols,
                 const float* __restrict p, const float* __restrict qt, int rank, float share,
                 float divisor) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* pi = p + i * rank;
    float* mi = m + i * cols;
    float* ei = e ? e + i * cols : nullptr;
    for (int64_t j0 = 0; j0 < cols; j0 += kBlock) {
      const int64_t j1 = std::min(cols, j0 + kBlock);
      const float p0 = pi[0];
      for (int64_t j = j0; j < j1; ++j) mi[j] = p0 * qt[j];
      for (int k = 1; k < rank; ++k) {
        const float pk = pi[k];
        const float* qk = qt + k * cols;
        for (int64_t j = j0; j < j1; ++j) mi[j] += pk * qk[j];
      }
      if (ei) {
        for (int64_t j = j0; j < j1; ++j) ei[j] -= share * mi[j];
      }
      if (divisor != 1.0f) {
        for (int64_t j = j0; j < j1; ++j) mi[j] /= divisor;
      }
    }
  }
}

void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) dst[j * rows + i] = src[i * cols + j];
  }
}

}  // namespace bigbatch::ddp_detail::low_rank
