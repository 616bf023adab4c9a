// The fused multi-tensor optimizer step on CUDA (fused_step.h: the
// algorithm, its launches and bytes; fused_rules.h: the element rules).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "../fused_rules.h"
#include "fused_step_cuda.h"

namespace bigbatch::optim_detail {
namespace {

constexpr int kThreads = 512;  // per block; a chunk is kFusedChunk / kThreads values per thread

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("fused optimizer step: ") + what + ": " +
                             cudaGetErrorString(e));
  }
}

// What launch 1 leaves for launch 2 and the host.
struct Outcome {
  double gradNormSq;
  int32_t skip;  // 1: a non-finite gradient, nothing is written
  int32_t pad;
};

// Sums v over the block; the total is valid in thread 0.
__device__ double blockSum(double v, double* shared) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < blockDim.x / 32 ? shared[threadIdx.x] : 0.0;
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  __syncthreads();  // `shared` is reused by the next call
  return v;
}

// Launch 1: one block per chunk; the last block to finish reduces.
__global__ void __launch_bounds__(kThreads)
    normsKernel(const FusedTensor* tensors, int nTensors, const FusedChunk* chunks,
                const int32_t* firstChunk, FusedHyper h, double* partials, float* coeff,
                Outcome* outcome, unsigned int* counter) {
  __shared__ double shared[kThreads / 32];
  __shared__ bool last;
  const int width = fused::gradColumn(h.rule) + 1;
  const FusedChunk c = chunks[blockIdx.x];
  const FusedTensor t = tensors[c.tensor];
  double s[3] = {0, 0, 0};
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) fused::accumulate(h, t, i, s);
  for (int k = 0; k < width; ++k) {
    const double total = blockSum(s[k], shared);
    if (threadIdx.x == 0) partials[blockIdx.x * 3 + k] = total;
  }
  // The classic last-block reduction (CUDA samples' threadFenceReduction):
  // publish the partials, then count the blocks done.
  __threadfence();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  // Each tensor's chunks in chunk order (deterministic), its coefficient,
  // and its share of |g|² (kept in `partials`' spare slot of its first chunk).
  __shared__ double gradSq[kThreads];
  double mine = 0;
  for (int ti = threadIdx.x; ti < nTensors; ti += blockDim.x) {
    double n[3] = {0, 0, 0};
    for (int32_t ch = firstChunk[ti]; ch < firstChunk[ti + 1]; ++ch) {
      for (int k = 0; k < width; ++k) n[k] += __ldcg(&partials[ch * 3 + k]);
    }
    coeff[ti] = tensors[ti].g ? fused::coefficient(h, tensors[ti], n) : 0.0f;
    mine += n[fused::gradColumn(h.rule)];
  }
  // |g|² in tensor order: thread j holds tensors j, j + blockDim, ...; the
  // sum over threads in thread order is deterministic too.
  gradSq[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int j = 0; j < blockDim.x; ++j) total += gradSq[j];
    outcome->gradNormSq = total;
    outcome->skip = isfinite(total) ? 0 : 1;
    *counter = 0;  // ready for the next step
  }
}

// Launch 2: one block per chunk, nothing when skipped.
__global__ void __launch_bounds__(kThreads)
    updateKernel(const FusedTensor* tensors, const FusedChunk* chunks, FusedHyper h,
                 const float* coeff, const Outcome* outcome) {
  if (outcome->skip) return;
  const FusedChunk c = chunks[blockIdx.x];
  const FusedTensor t = tensors[c.tensor];
  const float cf = coeff[c.tensor];
#pragma unroll 4
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) fused::update(h, t, i, cf);
}

}  // namespace

struct FusedCudaStep::State {
  std::vector<int64_t> numels;  // of the uploaded chunk table
  int nChunks = 0;
  FusedChunk* chunks = nullptr;
  int32_t* firstChunk = nullptr;
  FusedTensor* tensors = nullptr;      // device
  FusedTensor* tensorsHost = nullptr;  // pinned, the upload's source
  size_t tensorCapacity = 0;
  double* partials = nullptr;
  float* coeff = nullptr;
  Outcome* outcome = nullptr;
  Outcome* outcomeHost = nullptr;  // pinned
  unsigned int* counter = nullptr;

  void freeAll() {
    cudaFree(chunks);
    cudaFree(firstChunk);
    cudaFree(tensors);
    cudaFreeHost(tensorsHost);
    cudaFree(partials);
    cudaFree(coeff);
    cudaFree(outcome);
    cudaFreeHost(outcomeHost);
    cudaFree(counter);
    *this = State{};
  }
};

FusedCudaStep::FusedCudaStep() : s_(std::make_unique<State>()) {}

FusedCudaStep::~FusedCudaStep() { s_->freeAll(); }

FusedOutcome FusedCudaStep::run(const std::vector<FusedTensor>& tensors, const FusedHyper& h,
                                void* streamHandle) {
  const auto stream = static_cast<cudaStream_t>(streamHandle);
  State& s = *s_;
  std::vector<int64_t> numels;
  for (const auto& t : tensors) numels.push_back(t.g ? t.numel : 0);
  if (numels != s.numels) {  // first step, or another set of tensors: new tables
    check(cudaStreamSynchronize(stream), "waiting before re-allocation");
    s.freeAll();
    const std::vector<FusedChunk> chunks = fusedChunks(numels);
    std::vector<int32_t> first(numels.size() + 1, 0);
    for (const auto& c : chunks) ++first[c.tensor + 1];
    for (size_t t = 0; t < numels.size(); ++t) first[t + 1] += first[t];
    s.nChunks = static_cast<int>(chunks.size());
    const size_t n = tensors.size();
    check(cudaMalloc(&s.chunks, std::max<size_t>(1, chunks.size()) * sizeof(FusedChunk)),
          "cudaMalloc");
    check(cudaMalloc(&s.firstChunk, first.size() * sizeof(int32_t)), "cudaMalloc");
    check(cudaMalloc(&s.tensors, std::max<size_t>(1, n) * sizeof(FusedTensor)), "cudaMalloc");
    check(cudaMallocHost(&s.tensorsHost, std::max<size_t>(1, n) * sizeof(FusedTensor)),
          "cudaMallocHost");
    check(cudaMalloc(&s.partials, std::max<size_t>(1, chunks.size()) * 3 * sizeof(double)),
          "cudaMalloc");
    check(cudaMalloc(&s.coeff, std::max<size_t>(1, n) * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&s.outcome, sizeof(Outcome)), "cudaMalloc");
    check(cudaMallocHost(&s.outcomeHost, sizeof(Outcome)), "cudaMallocHost");
    check(cudaMalloc(&s.counter, sizeof(unsigned int)), "cudaMalloc");
    check(cudaMemsetAsync(s.counter, 0, sizeof(unsigned int), stream), "cudaMemset");
    check(cudaMemcpyAsync(s.chunks, chunks.data(), chunks.size() * sizeof(FusedChunk),
                          cudaMemcpyHostToDevice, stream),
          "uploading the chunk table");
    check(cudaMemcpyAsync(s.firstChunk, first.data(), first.size() * sizeof(int32_t),
                          cudaMemcpyHostToDevice, stream),
          "uploading the chunk table");
    check(cudaStreamSynchronize(stream), "uploading the chunk table");  // `chunks` goes away
    s.numels = std::move(numels);
    s.tensorCapacity = n;
  }
  FusedOutcome out;
  if (s.nChunks == 0) return out;
  // The previous step's sync guarantees its upload is done: the pinned
  // source may be rewritten.
  std::memcpy(s.tensorsHost, tensors.data(), tensors.size() * sizeof(FusedTensor));
  check(cudaMemcpyAsync(s.tensors, s.tensorsHost, tensors.size() * sizeof(FusedTensor),
                        cudaMemcpyHostToDevice, stream),
        "uploading the tensor table");
  normsKernel<<<s.nChunks, kThreads, 0, stream>>>(s.tensors, static_cast<int>(tensors.size()),
                                                  s.chunks, s.firstChunk, h, s.partials, s.coeff,
                                                  s.outcome, s.counter);
  check(cudaGetLastError(), "the norms launch");
  updateKernel<<<s.nChunks, kThreads, 0, stream>>>(s.tensors, s.chunks, h, s.coeff, s.outcome);
  check(cudaGetLastError(), "the update launch");
  check(cudaMemcpyAsync(s.outcomeHost, s.outcome, sizeof(Outcome), cudaMemcpyDeviceToHost, stream),
        "reading the outcome");
  check(cudaStreamSynchronize(stream), "the fused step");
  out.gradNormSq = s.outcomeHost->gradNormSq;
  out.applied = s.outcomeHost->skip == 0;
  return out;
}

}  // namespace bigbatch::optim_detail
