#include "low_rank_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

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

namespace {

// projectBack's sums in registers: GCC's vector extension, lowered to each
// target's own registers (a Lanes16 is one AVX-512 register; a Lanes8 one
// AVX2 register, or two SSE ones in the baseline build).
typedef float Lanes8 __attribute__((vector_size(32)));
typedef float Lanes16 __attribute__((vector_size(64)));

// One tile of projectBack: columns [j, j + Tile) of rows [i0, i1), for
// ranks [k0, k0 + K): each (k, column) sum in a register lane, over the
// rows in order from zero — the order of a plain loop over the rows, so
// the bits depend on neither the tile nor the target. The sums leave their
// registers through memcpy: indexing a vector's lanes would keep the whole
// array in memory, a load and a store per product (the cost of the
// untiled loop, whose sums lived in an array).
template <class V, int Tile, int K>
__attribute__((always_inline)) inline void projectTile(const float* __restrict x, int64_t cols,
                                                       int64_t i0, int64_t i1, int64_t j,
                                                       const float* __restrict p, int rank,
                                                       int k0, double* __restrict totals) {
  constexpr int kWidth = sizeof(V) / sizeof(float), kVectors = Tile / kWidth;
  static_assert(Tile % kWidth == 0, "whole vectors a tile");
  V acc[K][kVectors] = {};
  for (int64_t i = i0; i < i1; ++i) {
    V xv[kVectors];
    for (int v = 0; v < kVectors; ++v)
      std::memcpy(&xv[v], x + i * cols + j + v * kWidth, sizeof(V));
    for (int k = 0; k < K; ++k) {
      const V a = V{} + p[i * rank + k0 + k];
      for (int v = 0; v < kVectors; ++v) acc[k][v] += xv[v] * a;
    }
  }
  float sums[K][Tile];
  for (int k = 0; k < K; ++k) {
    for (int v = 0; v < kVectors; ++v) std::memcpy(&sums[k][v * kWidth], &acc[k][v], sizeof(V));
  }
  for (int k = 0; k < K; ++k) {
    for (int t = 0; t < Tile; ++t) totals[k * kBlock + t] += sums[k][t];
  }
}

// By blocks of kBlock columns, each block's rows kRowsPerSum at a time:
// every (k, column) float sum runs over those rows in order and then goes
// into its double total. Within a group of rows the columns go Tile at a
// time and the ranks two at a time, the sums in registers; a tile's strip
// of the group (a cache line or two of each row) stays in the first-level
// cache from one pair of ranks to the next.
template <class V, int Tile>
__attribute__((always_inline)) inline void projectBackTiled(const float* __restrict x,
                                                            int64_t rows, int64_t cols,
                                                            const float* __restrict p, int rank,
                                                            float* __restrict q,
                                                            std::vector<double>& work) {
  constexpr int64_t kRowsPerSum = 64;
  work.resize(static_cast<size_t>(rank * kBlock));
  double* __restrict totals = work.data();  // totals[k * kBlock + column in block]
  for (int64_t j0 = 0; j0 < cols; j0 += kBlock) {
    const int64_t width = std::min(kBlock, cols - j0);
    const int64_t tiled = width - width % Tile;
    for (int k = 0; k < rank; ++k) std::fill_n(totals + k * kBlock, width, 0.0);
    for (int64_t i0 = 0; i0 < rows; i0 += kRowsPerSum) {
      const int64_t i1 = std::min(rows, i0 + kRowsPerSum);
      for (int64_t t = 0; t < tiled; t += Tile) {
        int k0 = 0;
        for (; k0 + 2 <= rank; k0 += 2)
          projectTile<V, Tile, 2>(x, cols, i0, i1, j0 + t, p, rank, k0, totals + k0 * kBlock + t);
        if (k0 < rank)
          projectTile<V, Tile, 1>(x, cols, i0, i1, j0 + t, p, rank, k0, totals + k0 * kBlock + t);
      }
      // The last width % Tile columns: the same sums, one at a time.
      for (int64_t j = tiled; j < width; ++j) {
        for (int k = 0; k < rank; ++k) {
          float sum = 0.0f;
          for (int64_t i = i0; i < i1; ++i) sum += x[i * cols + j0 + j] * p[i * rank + k];
          totals[k * kBlock + j] += sum;
        }
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      for (int k = 0; k < rank; ++k)
        q[(j0 + j) * rank + k] = static_cast<float>(totals[k * kBlock + j]);
    }
  }
}

// One build per target, chosen once at run time (not target_clones: the
// tile's width differs by target). On the 350000 x 64 matrix (one thread,
// a 2-core Xeon guest with AVX-512, 2026-12-05, the untiled loop and this
// one alternating in one process): 4.6-5.0 ms against 6.6-7.9 at rank 2,
// 7.1-8.7 against 11.6-15.9 at rank 4, the same bits; the AVX2 build took
// 6.6 ms at rank 2 in a harness of the three builds.
__attribute__((target("avx512f"))) void projectBackAvx512(const float* x, int64_t rows,
                                                          int64_t cols, const float* p, int rank,
                                                          float* q, std::vector<double>& work) {
  projectBackTiled<Lanes16, 32>(x, rows, cols, p, rank, q, work);
}
__attribute__((target("avx2"))) void projectBackAvx2(const float* x, int64_t rows, int64_t cols,
                                                     const float* p, int rank, float* q,
                                                     std::vector<double>& work) {
  projectBackTiled<Lanes8, 16>(x, rows, cols, p, rank, q, work);
}
void projectBackBaseline(const float* x, int64_t rows, int64_t cols, const float* p, int rank,
                         float* q, std::vector<double>& work) {
  projectBackTiled<Lanes8, 16>(x, rows, cols, p, rank, q, work);
}

}  // namespace

void projectBack(const float* x, int64_t rows, int64_t cols, const float* p, int rank, float* q,
                 std::vector<double>& work) {
  static const ProjectBackBuild build = projectBackBuilds().front().second;
  build(x, rows, cols, p, rank, q, work);
}

std::vector<std::pair<const char*, ProjectBackBuild>> projectBackBuilds() {
  std::vector<std::pair<const char*, ProjectBackBuild>> builds;  // the fastest first
  if (__builtin_cpu_supports("avx512f")) builds.emplace_back("avx512", projectBackAvx512);
  if (__builtin_cpu_supports("avx2")) builds.emplace_back("avx2", projectBackAvx2);
  builds.emplace_back("baseline", projectBackBaseline);
  return builds;
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

namespace {

// Eight double lanes per sum (lane = index mod 8), folded in lane order:
// independent additions the compiler may vectorise without reordering any.
constexpr int kDoubleLanes = 8;

double dotInLanes(const double* __restrict a, const double* __restrict b, int64_t n) {
  double lanes[kDoubleLanes] = {};
  int64_t i = 0;
  for (; i + kDoubleLanes <= n; i += kDoubleLanes) {
    for (int t = 0; t < kDoubleLanes; ++t) lanes[t] += a[i + t] * b[i + t];
  }
  for (int t = 0; i < n; ++i, ++t) lanes[t] += a[i] * b[i];
  double sum = 0.0;
  for (int t = 0; t < kDoubleLanes; ++t) sum += lanes[t];
  return sum;
}

}  // namespace

// Column-major in `work` so that each pass runs down contiguous memory; a
// pass per norm, dot and update. At rank 4 on 350000 rows: 6.6 ms against
// 11.4 for the row-major loops it replaces (one sum each, a chain of
// dependent additions), 2.9 against 2.8 at rank 2 (a harness of the two,
// one thread, 2026-12-05). One build, not target_clones: its bits are the
// same on every rank because every rank runs the same instructions.
void orthogonalise(float* __restrict p, int64_t rows, int rank, std::vector<double>& work) {
  work.resize(static_cast<size_t>(rows * rank));
  double* __restrict w = work.data();  // w[c * rows + i]
  for (int64_t i = 0; i < rows; ++i) {
    for (int c = 0; c < rank; ++c) w[c * rows + i] = p[i * rank + c];
  }
  std::vector<double> originals(static_cast<size_t>(rank));
  for (int c = 0; c < rank; ++c) originals[c] = dotInLanes(w + c * rows, w + c * rows, rows);
  for (int c = 0; c < rank; ++c) {
    double* __restrict wc = w + c * rows;
    // Column 0 is still as it came: its norm is its original's.
    const double norm = c == 0 ? originals[0] : dotInLanes(wc, wc, rows);
    const double scale = norm > 1e-18 * originals[c] && norm > 0 ? 1.0 / std::sqrt(norm) : 0.0;
    for (int64_t i = 0; i < rows; ++i) wc[i] *= scale;
    for (int d = c + 1; d < rank; ++d) {
      double* __restrict wd = w + d * rows;
      const double dot = dotInLanes(wc, wd, rows);
      for (int64_t i = 0; i < rows; ++i) wd[i] -= dot * wc[i];
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    for (int c = 0; c < rank; ++c) p[i * rank + c] = static_cast<float>(w[c * rows + i]);
  }
}

// x * 0 is 0 for a finite x and NaN for an infinite or NaN one; sixteen
// lanes of such sums vectorise, and any NaN survives to the end.
BIGBATCH_MULTIVERSION
bool allFinite(const float* __restrict v, int64_t n) {
  float lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int t = 0; t < kLanes; ++t) lanes[t] += v[i + t] * 0.0f;
  }
  for (int t = 0; i < n; ++i, ++t) lanes[t] += v[i] * 0.0f;
  float sum = 0.0f;
  for (int t = 0; t < kLanes; ++t) sum += lanes[t];
  return sum == 0.0f;
}

void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) dst[j * rows + i] = src[i * cols + j];
  }
}

}  // namespace bigbatch::ddp_detail::low_rank
