// PowerSGD's passes over one compressed gradient on 1 thread: the ATen
// calls the codec made before (E += G; mm(E, Q); mm(E^T, P); mm(P, Q^T);
// E -= M / N; isfinite().all()) against the kernels of
// src/ddp/low_rank_kernels.h (and its orthogonalisation alone), on
// the matrices of bench/compression_bench.sh's 26 M-parameter model
// (model.hidden = 350000: hidden.weight 350000 x 64, fc.weight 10 x 350000).
//
// Build and run (ATen's products on one thread too: torch::set_num_threads
// does not reach the pool of Debian's OpenBLAS, its environment does):
//   scripts/build --target low_rank_kernels_bench &&
//   OPENBLAS_NUM_THREADS=1 build/bench/low_rank_kernels_bench
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <vector>

#include "low_rank_kernels.h"

namespace {

namespace low_rank = bigbatch::ddp_detail::low_rank;

struct Operands {
  torch::Tensor g, e, q, qt, p, m;
  Operands(int64_t rows, int64_t cols, int64_t rank)
      : g(torch::randn({rows, cols})),
        e(torch::randn({rows, cols})),
        q(torch::randn({cols, rank})),
        qt(q.t().contiguous()),
        p(torch::randn({rows, rank})),
        m(torch::empty({rows, cols})) {}
};

void setUp(benchmark::State& state) {
  torch::set_num_threads(1);
  state.counters["MB"] = static_cast<double>(state.range(0) * state.range(1) * 4) / 1e6;
}

// Step 1: X = E + G and P = X Q.
void AtenFoldAndProject(benchmark::State& state) {
  setUp(state);
  Operands o(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) {
    o.e.add_(o.g);
    torch::mm_out(o.p, o.e, o.q);
  }
}
void FusedFoldAndProject(benchmark::State& state) {
  setUp(state);
  Operands o(state.range(0), state.range(1), state.range(2));
  for (auto _ : state)
    low_rank::foldAndProject(o.e.data_ptr<float>(), o.g.data_ptr<float>(), o.e.size(0),
                             o.e.size(1), o.qt.data_ptr<float>(), o.q.size(1),
                             o.p.data_ptr<float>());
}

// Step 2: Q = X^T P.
void AtenProjectBack(benchmark::State& state) {
  setUp(state);
  Operands o(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) torch::mm_out(o.q, o.e.t(), o.p);
}
void FusedProjectBack(benchmark::State& state) {
  setUp(state);
  Operands o(state.range(0), state.range(1), state.range(2));
  std::vector<double> work;
  for (auto _ : state)
    low_rank::projectBack(o.e.data_ptr<float>(), o.e.size(0), o.e.size(1),
                          o.p.data_ptr<float>(), o.q.size(1), o.q.data_ptr<float>(), work);
}

// Step 3: M = P Q^T and E -= M / N (N = 2).
void AtenReconstruct(benchmark::State& state) {
  setUp(state);
  Operands o(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) {
    torch::mm_out(o.m, o.p, o.q.t());
    o.e.sub_(o.m, 0.5);
  }
}
// `divisor` 1: the sum (bigbatch train's codec); 2: the mean over 2 ranks,
// as the torch backend's hooks form it.
void FusedReconstruct(benchmark::State& state, float divisor) {
  setUp(state);
  Operands o(state.range(0), state.range(1), state.range(2));
  for (auto _ : state)
    low_rank::reconstruct(o.m.data_ptr<float>(), o.e.data_ptr<float>(), o.e.size(0),
                          o.e.size(1), o.p.data_ptr<float>(), o.qt.data_ptr<float>(),
                          o.q.size(1), 0.5f, divisor);
}

// Between steps 1 and 2: the summed P orthonormalised (modified
// Gram-Schmidt in double); after each sum, the check that P (then Q) is
// finite, which ATen did as isfinite().all() — timed here on P and Q
// together, (rows + cols) x rank floats.
void Orthogonalise(benchmark::State& state) {
  setUp(state);
  const torch::Tensor p0 = torch::randn({state.range(0), state.range(2)});
  torch::Tensor p = p0.clone();
  std::vector<double> work;
  for (auto _ : state) {
    p.copy_(p0);  // a fresh P each time (about 0.1 ms of the time at 350000 x 4)
    low_rank::orthogonalise(p.data_ptr<float>(), p.size(0), p.size(1), work);
  }
}
void AtenAllFinite(benchmark::State& state) {
  setUp(state);
  const torch::Tensor p = torch::randn({(state.range(0) + state.range(1)) * state.range(2)});
  for (auto _ : state) benchmark::DoNotOptimize(p.isfinite().all().item<bool>());
}
void FusedAllFinite(benchmark::State& state) {
  setUp(state);
  const torch::Tensor p = torch::randn({(state.range(0) + state.range(1)) * state.range(2)});
  for (auto _ : state) benchmark::DoNotOptimize(low_rank::allFinite(p.data_ptr<float>(), p.numel()));
}

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "cols", "rank"});
  b->Args({350000, 64, 2})->Args({350000, 64, 4})->Args({10, 350000, 2});
  b->Unit(benchmark::kMillisecond)->MinTime(0.5);
}

BENCHMARK(AtenFoldAndProject)->Apply(Shapes);
BENCHMARK(FusedFoldAndProject)->Apply(Shapes);
BENCHMARK(AtenProjectBack)->Apply(Shapes);
BENCHMARK(FusedProjectBack)->Apply(Shapes);
BENCHMARK(AtenReconstruct)->Apply(Shapes);
BENCHMARK_CAPTURE(FusedReconstruct, sum, 1.0f)->Apply(Shapes);
BENCHMARK_CAPTURE(FusedReconstruct, mean_of_2, 2.0f)->Apply(Shapes);
BENCHMARK(Orthogonalise)->Apply(Shapes);
BENCHMARK(AtenAllFinite)->Apply(Shapes);
BENCHMARK(FusedAllFinite)->Apply(Shapes);

}  // namespace

BENCHMARK_MAIN();
