// The low-rank kernels (src/ddp/low_rank_kernels.h) against the ATen
// products they replace, on shapes whose rows and columns are not
// multiples of the kernels' blocks and lanes; reconstruct()'s and
// projectBack()'s rounding against the same sums written out in plain
// float; orthogonalise() against the textbook's Gram-Schmidt.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "low_rank_kernels.h"

namespace bigbatch {
namespace {

namespace low_rank = ddp_detail::low_rank;

struct Shape {
  int64_t rows, cols;
  int rank;
};

// Wide rows (more than one column block), tall and narrow, one row, rank 1.
const Shape kShapes[] = {{5, 2500, 3}, {1037, 13, 2}, {1, 9, 1}, {64, 1024, 4}};

torch::Tensor randomMatrix(int64_t rows, int64_t cols, uint64_t seed) {
  at::Generator generator = at::detail::createCPUGenerator(seed);
  return torch::randn({rows, cols}, generator, torch::kFloat);
}

torch::Tensor transposed(const torch::Tensor& m) { return m.t().contiguous(); }

// Float sums against the double ones the kernels form: a few float
// roundings of the largest term, relative to the result's scale.
void expectClose(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = want.abs().max().item<double>();
  EXPECT_LE((got.to(torch::kDouble) - want).abs().max().item<double>(), 1e-5 * scale);
}

TEST(LowRankKernels, FoldAndProjectIsTheSumTimesQ) {
  for (const Shape& s : kShapes) {
    const torch::Tensor e = randomMatrix(s.rows, s.cols, 1), g = randomMatrix(s.rows, s.cols, 2);
    const torch::Tensor q = randomMatrix(s.cols, s.rank, 3);
    const torch::Tensor qt = transposed(q);
    torch::Tensor x = e.clone(), p = torch::empty({s.rows, s.rank});
    low_rank::foldAndProject(x.data_ptr<float>(), g.data_ptr<float>(), s.rows, s.cols,
                             qt.data_ptr<float>(), s.rank, p.data_ptr<float>());
    EXPECT_TRUE(torch::equal(x, e + g)) << s.rows << "x" << s.cols;
    expectClose(p, torch::mm((e + g).to(torch::kDouble), q.to(torch::kDouble)));
    // Without a gradient to fold, x is only read.
    low_rank::foldAndProject(x.data_ptr<float>(), nullptr, s.rows, s.cols, qt.data_ptr<float>(),
                             s.rank, p.data_ptr<float>());
    EXPECT_TRUE(torch::equal(x, e + g));
    expectClose(p, torch::mm(x.to(torch::kDouble), q.to(torch::kDouble)));
  }
}

TEST(LowRankKernels, ProjectBackIsXTransposedTimesP) {
  std::vector<double> work;
  for (const Shape& s : kShapes) {
    const torch::Tensor x = randomMatrix(s.rows, s.cols, 4), p = randomMatrix(s.rows, s.rank, 5);
    torch::Tensor q = torch::empty({s.cols, s.rank});
    low_rank::projectBack(x.data_ptr<float>(), s.rows, s.cols, p.data_ptr<float>(), s.rank,
                          q.data_ptr<float>(), work);
    expectClose(q, torch::mm(x.t().to(torch::kDouble), p.to(torch::kDouble)));
  }
}

// projectBack's sums in a fixed order, whatever tile and registers a
// build uses: for each column, float sums over 64 rows at a time, in row
// order from zero, each added in turn to a double total. Every build this
// CPU can run (AVX-512, AVX2, baseline), on shapes with rows past one
// group, columns past one block and not a whole number of tiles, and
// ranks that are not a multiple of two.
TEST(LowRankKernels, ProjectBackSumsAsPlainCodeInRowGroups) {
  std::vector<double> work;
  const Shape shapes[] = {{130, 1100, 5}, {1037, 13, 2}, {200, 64, 4}, {70, 47, 3}, {1, 9, 1}};
  const auto builds = low_rank::projectBackBuilds();
  ASSERT_FALSE(builds.empty());
  EXPECT_STREQ(builds.back().first, "baseline");
  for (const auto& [build, projectBack] : builds) {
    for (const Shape& s : shapes) {
      const torch::Tensor x = randomMatrix(s.rows, s.cols, 13);
      const torch::Tensor p = randomMatrix(s.rows, s.rank, 14);
      torch::Tensor q = torch::empty({s.cols, s.rank});
      projectBack(x.data_ptr<float>(), s.rows, s.cols, p.data_ptr<float>(), s.rank,
                  q.data_ptr<float>(), work);
      const auto X = x.accessor<float, 2>(), P = p.accessor<float, 2>();
      const auto Q = q.accessor<float, 2>();
      int64_t mismatches = 0;
      for (int64_t j = 0; j < s.cols; ++j) {
        for (int k = 0; k < s.rank; ++k) {
          double total = 0.0;
          for (int64_t i0 = 0; i0 < s.rows; i0 += 64) {
            volatile float sum = 0.0f;  // volatile: each step rounded to float
            for (int64_t i = i0; i < std::min(s.rows, i0 + 64); ++i) {
              volatile float term = X[i][j] * P[i][k];
              sum = sum + term;
            }
            total += sum;
          }
          mismatches += Q[j][k] != static_cast<float>(total);
        }
      }
      EXPECT_EQ(mismatches, 0)
          << build << ": " << s.rows << "x" << s.cols << " rank " << s.rank;
    }
  }
}

// The reconstruction must be the same bits on every rank, whichever
// version of the kernel the CPU picks: exactly the plain float sum over k
// in order, then e - share * m, each operation rounded once.
TEST(LowRankKernels, ReconstructRoundsAsPlainFloatCode) {
  for (const Shape& s : kShapes) {
    const torch::Tensor p = randomMatrix(s.rows, s.rank, 6), q = randomMatrix(s.cols, s.rank, 7);
    const torch::Tensor e0 = randomMatrix(s.rows, s.cols, 8);
    const torch::Tensor qt = transposed(q);
    const float share = 1.0f / 3.0f;
    torch::Tensor m = torch::empty({s.rows, s.cols}), e = e0.clone();
    low_rank::reconstruct(m.data_ptr<float>(), e.data_ptr<float>(), s.rows, s.cols,
                          p.data_ptr<float>(), qt.data_ptr<float>(), s.rank, share);
    const auto P = p.accessor<float, 2>(), Q = q.accessor<float, 2>(), E0 = e0.accessor<float, 2>();
    const auto M = m.accessor<float, 2>(), E = e.accessor<float, 2>();
    int64_t mismatches = 0;
    for (int64_t i = 0; i < s.rows; ++i) {
      for (int64_t j = 0; j < s.cols; ++j) {
        volatile float sum = P[i][0] * Q[j][0];  // volatile: each step rounded to float
        for (int k = 1; k < s.rank; ++k) {
          volatile float term = P[i][k] * Q[j][k];
          sum = sum + term;
        }
        volatile float scaled = share * sum;
        volatile float kept = E0[i][j] - scaled;
        mismatches += M[i][j] != sum || E[i][j] != kept;
      }
    }
    EXPECT_EQ(mismatches, 0) << s.rows << "x" << s.cols << " rank " << s.rank;
    // Without error memory only m is written.
    torch::Tensor m2 = torch::empty({s.rows, s.cols});
    low_rank::reconstruct(m2.data_ptr<float>(), nullptr, s.rows, s.cols, p.data_ptr<float>(),
                          qt.data_ptr<float>(), s.rank, share);
    EXPECT_TRUE(torch::equal(m2, m));
  }
}

// The mean: each value of m is the sum divided by the ranks, rounded once,
// for any number of ranks; e keeps share * the sum, whatever the divisor.
TEST(LowRankKernels, ReconstructDividesTheSumAsPlainFloatCode) {
  for (const Shape& s : kShapes) {
    const torch::Tensor p = randomMatrix(s.rows, s.rank, 10), q = randomMatrix(s.cols, s.rank, 11);
    const torch::Tensor qt = transposed(q), e0 = randomMatrix(s.rows, s.cols, 12);
    torch::Tensor sum = torch::empty({s.rows, s.cols}), e1 = e0.clone();
    low_rank::reconstruct(sum.data_ptr<float>(), e1.data_ptr<float>(), s.rows, s.cols,
                          p.data_ptr<float>(), qt.data_ptr<float>(), s.rank, 0.25f);
    for (const float divisor : {2.0f, 3.0f, 4.0f, 6.0f, 1024.0f}) {
      torch::Tensor m = torch::empty({s.rows, s.cols}), e = e0.clone();
      low_rank::reconstruct(m.data_ptr<float>(), e.data_ptr<float>(), s.rows, s.cols,
                            p.data_ptr<float>(), qt.data_ptr<float>(), s.rank, 0.25f, divisor);
      const auto M = m.accessor<float, 2>(), S = sum.accessor<float, 2>();
      int64_t mismatches = 0;
      for (int64_t i = 0; i < s.rows; ++i) {
        for (int64_t j = 0; j < s.cols; ++j) {
          volatile float mean = S[i][j] / divisor;
          mismatches += M[i][j] != mean;
        }
      }
      EXPECT_EQ(mismatches, 0) << s.rows << "x" << s.cols << " divisor " << divisor;
      EXPECT_TRUE(torch::equal(e, e1)) << s.rows << "x" << s.cols << " divisor " << divisor;
    }
  }
}

// Modified Gram-Schmidt as written in the textbook, in double: the
// kernel's sums run in lanes, in another order, so the two float results
// differ by double roundings amplified at most by the rounding to float:
// far under 1e-6 on unit columns.
void textbookOrthogonalise(std::vector<double>& a, int64_t rows, int rank) {
  auto at = [&](int64_t i, int c) -> double& { return a[static_cast<size_t>(i * rank + c)]; };
  for (int c = 0; c < rank; ++c) {
    double norm = 0;
    for (int64_t i = 0; i < rows; ++i) norm += at(i, c) * at(i, c);
    for (int64_t i = 0; i < rows; ++i) at(i, c) /= std::sqrt(norm);
    for (int d = c + 1; d < rank; ++d) {
      double dot = 0;
      for (int64_t i = 0; i < rows; ++i) dot += at(i, c) * at(i, d);
      for (int64_t i = 0; i < rows; ++i) at(i, d) -= dot * at(i, c);
    }
  }
}

TEST(LowRankKernels, OrthogonaliseIsModifiedGramSchmidt) {
  std::vector<double> work;
  for (const auto& [rows, rank] : {std::pair<int64_t, int>{1037, 4}, {9, 3}, {350, 1}, {70, 5}}) {
    torch::Tensor p = randomMatrix(rows, rank, 15);
    std::vector<double> want(p.data_ptr<float>(), p.data_ptr<float>() + rows * rank);
    textbookOrthogonalise(want, rows, rank);
    low_rank::orthogonalise(p.data_ptr<float>(), rows, rank, work);
    const torch::Tensor expected = torch::tensor(want, torch::kDouble).view({rows, rank});
    EXPECT_LE((p.to(torch::kDouble) - expected).abs().max().item<double>(), 1e-6)
        << rows << "x" << rank;
    const torch::Tensor gram = torch::mm(p.t(), p).to(torch::kDouble);
    EXPECT_LE((gram - torch::eye(rank, torch::kDouble)).abs().max().item<double>(), 1e-5);
  }
}

// Nearly parallel columns (P's condition number about 1e4): carried out in
// double, the orthogonalisation loses nothing before its one rounding to
// float, so the columns come out orthonormal to float precision. (In
// float, the loss would be about 1e-7 x 1e4 = 1e-3.)
TEST(LowRankKernels, OrthogonaliseKeepsNearlyParallelColumnsOrthonormal) {
  std::vector<double> work;
  const int64_t rows = 5000;
  const torch::Tensor base = randomMatrix(rows, 1, 21), noise = randomMatrix(rows, 3, 22);
  torch::Tensor p = (base.expand({rows, 3}) + 1e-4 * noise).contiguous();
  low_rank::orthogonalise(p.data_ptr<float>(), rows, 3, work);
  const torch::Tensor gram = torch::mm(p.t().to(torch::kDouble), p.to(torch::kDouble));
  EXPECT_LE((gram - torch::eye(3, torch::kDouble)).abs().max().item<double>(), 1e-5);
}

// A column the earlier ones already span (here twice the first, and a
// zero one) becomes zero, not rounding noise scaled up to unit length.
TEST(LowRankKernels, OrthogonaliseZeroesADependentColumn) {
  std::vector<double> work;
  const int64_t rows = 100;
  torch::Tensor p = randomMatrix(rows, 3, 16);
  p.select(1, 1).copy_(p.select(1, 0) * 2);
  p.select(1, 2).zero_();
  low_rank::orthogonalise(p.data_ptr<float>(), rows, 3, work);
  EXPECT_NEAR(p.select(1, 0).norm().item<double>(), 1.0, 1e-6);
  EXPECT_TRUE(torch::equal(p.select(1, 1), torch::zeros({rows})));
  EXPECT_TRUE(torch::equal(p.select(1, 2), torch::zeros({rows})));
}

TEST(LowRankKernels, AllFiniteFindsAnyInfinityOrNan) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v(37, 1.0f);
  v[3] = std::numeric_limits<float>::max();  // finite, however large
  v[4] = -0.0f;
  EXPECT_TRUE(low_rank::allFinite(v.data(), 37));
  EXPECT_TRUE(low_rank::allFinite(v.data(), 0));
  for (const size_t at : {size_t{0}, size_t{17}, size_t{36}}) {  // in a lane block, and after
    for (const float bad : {inf, -inf, nan}) {
      std::vector<float> w = v;
      w[at] = bad;
      EXPECT_FALSE(low_rank::allFinite(w.data(), 37)) << at << " " << bad;
    }
  }
}

TEST(LowRankKernels, TransposeSwapsTheIndices) {
  const torch::Tensor a = randomMatrix(7, 3, 9);
  torch::Tensor b = torch::empty({3, 7});
  low_rank::transpose(a.data_ptr<float>(), 7, 3, b.data_ptr<float>());
  EXPECT_TRUE(torch::equal(b, a.t()));
}

}  // namespace
}  // namespace bigbatch
