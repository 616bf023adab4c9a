// Low-rank kernels: PowerSGD's three passes over a compressed gradient
// (powersgd_codec.h), each one pass over memory, and the work between
// them: the orthogonalisation of P and the checks that P and Q are finite.
//
// Why not ATen's mm: the codec's work is three skinny products and two
// elementwise passes over the gradient, and ATen runs them as five passes
// with the products well below the memory's speed. Fused — E += G with
// P = E Q; Q = E^T P; M = P Q^T with E -= M / N — each reads or writes E
// once. On the 26 M-parameter model of bench/compression_bench.sh
// (hidden.weight 350000 x 64, rank 2, 1 thread) the three steps take about
// half of ATen's time (docs/BENCHMARKS.md, "With the codec's passes
// fused"; build/bench/low_rank_kernels_bench measures both side by side).
//
// Matrices are row-major floats. The products sum in float lanes folded
// into double. reconstruct() and orthogonalise() — whose results must be
// the same bits on every rank — round as plain code: reconstruct's AVX2
// and baseline versions give the same bits, and orthogonalise has one
// build, so ranks on different x86-64 CPUs stay identical. projectBack has
// one build per target (AVX-512, AVX2, baseline), chosen at run time, all
// summing in the same order. The file is built with -ffp-contract=off so
// that no flag or clone that brings in fused multiply-add changes that.
//
// Threading: plain functions of their arguments; the caller's thread runs
// them. Internal to src/ddp.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace bigbatch::ddp_detail::low_rank {

// x (rows x cols) += g where g is not null (error feedback: x is the
// error memory, g the gradient); then p = x q, where qt = q^T (rank x
// cols) and p is rows x rank.
void foldAndProject(float* x, const float* g, int64_t rows, int64_t cols, const float* qt,
                    int rank, float* p);

// q = x^T p: x rows x cols, p rows x rank, q cols x rank. `work` holds the
// double sums of a block of columns.
void projectBack(const float* x, int64_t rows, int64_t cols, const float* p, int rank, float* q,
                 std::vector<double>& work);

// v = p qt (p rows x rank, qt rank x cols; each value summed over k in
// order, in float); e -= share * v where e is not null; m = v / divisor
// (divisor 1: the sum itself; the world size: the mean, divided while the
// block is in cache instead of in a pass of its own).
void reconstruct(float* m, float* e, int64_t rows, int64_t cols, const float* p, const float* qt,
                 int rank, float share, float divisor = 1.0f);

// Orthonormalises the columns of the rows x rank matrix at `p` (row-major),
// in place, by modified Gram-Schmidt carried out in double (`work` holds
// the copy), so a poorly conditioned P loses no orthogonality before it is
// rounded back to float once. A column with nothing left once the earlier
// ones are taken out (a zero gradient, or a matrix of lower rank than the
// factors: under 1e-9 of its own norm) becomes zero rather than amplified
// rounding noise. Its sums run in fixed lanes folded in a fixed order, with
// no fused multiply-add, in one build: every rank, on any x86-64 CPU, gets
// the same bits from the same P.
void orthogonalise(float* p, int64_t rows, int rank, std::vector<double>& work);

// True when none of the n values is infinite or NaN.
bool allFinite(const float* v, int64_t n);

// The builds of projectBack this CPU can run, named ("avx512", "avx2",
// "baseline"), for tests that check each gives the same bits.
using ProjectBackBuild = void (*)(const float* x, int64_t rows, int64_t cols, const float* p,
                                  int rank, float* q, std::vector<double>& work);
std::vector<std::pair<const char*, ProjectBackBuild>> projectBackBuilds();

// dst (cols x rows) = src^T (src rows x cols).
void transpose(const float* src, int64_t rows, int64_t cols, float* dst);

}  // namespace bigbatch::ddp_detail::low_rank
