// Multi-tensor passes: a list of tensors seen as one element space, cut into
// fixed chunks of at most kChunkElements (each chunk inside one tensor), and
// the chunks spread over libtorch's intra-op threads in contiguous ranges
// balanced by element count. A per-tensor sum is the sum of its chunks'
// partial sums in chunk order, so it does not depend on the thread count.
//
// Internal to src/optim. Not thread-safe: one owner thread calls forEach(),
// which itself runs chunks on the intra-op pool.
#pragma once

#include <ATen/Parallel.h>

#include <cstdint>
#include <vector>

namespace bigbatch::optim_detail {

constexpr int64_t kChunkElements = int64_t{1} << 14;  // 64 KiB of fp32
// Below this many elements in all, one thread does the whole pass: waking
// the pool costs more than it saves on a small model.
constexpr int64_t kSerialBelow = int64_t{1} << 16;

struct Chunk {
  int32_t tensor;
  int64_t begin;  // element offset inside the tensor
  int64_t end;
};

class MultiTensorPlan {
 public:
  MultiTensorPlan() = default;
  explicit MultiTensorPlan(const std::vector<int64_t>& numels);

  const std::vector<Chunk>& chunks() const { return chunks_; }
  int64_t totalElements() const { return total_; }
  size_t tensors() const { return firstChunk_.size() - 1; }
  // Chunks [firstChunk(t), firstChunk(t + 1)) belong to tensor t.
  size_t firstChunk(size_t t) const { return firstChunk_[t]; }

  // Calls fn(chunkIndex) once for every chunk, on the intra-op threads.
  // Each thread walks its own contiguous range of chunks, forward or
  // (`backward`) from its end: of two passes over the same data in opposite
  // directions, the second starts on the chunks the first touched last,
  // which may still be in cache.
  template <class Fn>
  void forEach(Fn&& fn, bool backward = false) const {
    const int threads = at::get_num_threads();
    const auto walk = [&](size_t begin, size_t end) {
      if (backward) {
        for (size_t c = end; c > begin; --c) fn(c - 1);
      } else {
        for (size_t c = begin; c < end; ++c) fn(c);
      }
    };
    if (total_ < kSerialBelow || threads <= 1) {
      walk(0, chunks_.size());
      return;
    }
    const std::vector<size_t>& bounds = boundsFor(threads);
    at::parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) walk(bounds[t], bounds[t + 1]);
    });
  }

  // Sums per-chunk partials (partials[c * width + k]) into per-tensor totals
  // (out[t * width + k]) in chunk order.
  void reduce(const std::vector<double>& partials, int width, std::vector<double>& out) const;

 private:
  const std::vector<size_t>& boundsFor(int threads) const;

  std::vector<Chunk> chunks_;
  std::vector<size_t> firstChunk_;
  std::vector<int64_t> chunkStart_;  // element offset of each chunk in the whole space
  int64_t total_ = 0;
  mutable int boundsThreads_ = 0;
  mutable std::vector<size_t> bounds_;
};

// The element loops, compiled for AVX2 and baseline x86-64 with the choice
// made at load time (GCC function multi-versioning). Norms accumulate in
// double in a fixed lane order.
namespace kernels {

// s[0] += Σ a², s[1] += Σ b² (b may be null).
void sumSquares(const float* a, const float* b, int64_t n, double* s);
// Every update reads the gradient as gs·g (gs: 1 / loss scale; a power of
// two, so the product is exact and gs = 1 changes nothing).
//
// SGD, PyTorch form: d = gs·g + wd·w; v = m·v + d; w -= lr·(nesterov ? d + m·v : v).
void sgdUpdate(float* w, const float* g, float* v, int64_t n, float lr, float m, float wd,
               bool nesterov, float gs);
// LARS: v = m·v + c·(gs·g + wd·w); w -= v, with c = lr·trust. When
// `wNormSq` is given, *wNormSq += Σ (new w)², summed exactly as
// sumSquares(new w) would, so the next step can carry it (carried_norms.h).
void larsUpdate(float* w, const float* g, float* v, int64_t n, float m, float c, float wd,
                float gs, double* wNormSq);

struct LambCoefficients {
  float beta1, beta2;
  float bias1, bias2;  // 1 − β^t
  float epsilon;
  float wd;
  float gs;  // gradient multiplier (1 / loss scale)
};
// LAMB norm pass, state untouched: s[0] += Σ w², s[1] += Σ u², s[2] += Σ (gs·g)²
// with u from the moments this step would write.
void lambNorms(const float* w, const float* g, const float* m, const float* v, int64_t n,
               const LambCoefficients& k, double* s);
// LAMB update pass: writes the moments and w -= c·u (the same u as lambNorms).
void lambUpdate(float* w, const float* g, float* m, float* v, int64_t n, const LambCoefficients& k,
                float c);

}  // namespace kernels
}  // namespace bigbatch::optim_detail
