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

// What launch 1's last block leaves for launch 2 and the host (copied to
// pinned memory by a deferred step).
struct Report {
  double gradNormSq;
  int32_t skip;  // 1: a non-finite gradient, nothing is written
  int32_t pad;
  double scaleBefore;          // deferred, loss scale attached
  LossScalerState scaleAfter;  // likewise
};

// The step's state in device memory.
struct DeviceState {
  Report report;
  float gradScaleUsed;    // the deferred step's 1 / scale, for launch 2
  int32_t scaleAttached;  // 1: gradScale is 1 / scale.scale, updated after each step
  FusedStepScalars scalars;
  LossScalerState scale;
  LossScaleRule rule;
};

// A deferred step reads its per-step values from device memory: each
// tensor's lr and decay are multipliers of scalars.lr and .decayScale.
__device__ void readScalars(FusedHyper& h, const DeviceState* st) {
  const FusedStepScalars& v = st->scalars;
  h.momentum = v.momentum;
  h.bias1 = v.bias1;
  h.bias2 = v.bias2;
  h.gradScale = st->scaleAttached ? static_cast<float>(1.0 / st->scale.scale) : v.gradScale;
}

__device__ FusedTensor tensorAt(const FusedTensor* tensors, int i, const DeviceState* st,
                                int deferred) {
  FusedTensor t = tensors[i];
  if (deferred) {
    t.lr *= st->scalars.lr;
    t.decay *= st->scalars.decayScale;
  }
  return t;
}

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
                DeviceState* st, unsigned int* counter, int deferred) {
  __shared__ double shared[kThreads / 32];
  __shared__ bool last;
  if (deferred) readScalars(h, st);
  const int width = fused::gradColumn(h.rule) + 1;
  const FusedChunk c = chunks[blockIdx.x];
  const FusedTensor t = tensorAt(tensors, c.tensor, st, deferred);
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
    coeff[ti] = tensors[ti].g ? fused::coefficient(h, tensorAt(tensors, ti, st, deferred), n) : 0.0f;
    mine += n[fused::gradColumn(h.rule)];
  }
  // |g|² in tensor order: thread j holds tensors j, j + blockDim, ...; the
  // sum over threads in thread order is deterministic too.
  gradSq[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int j = 0; j < blockDim.x; ++j) total += gradSq[j];
    const bool finite = isfinite(total);
    st->report.gradNormSq = total;
    st->report.skip = finite ? 0 : 1;
    if (deferred) {
      st->gradScaleUsed = h.gradScale;
      if (st->scaleAttached) {  // the host's rule, on the device (loss_scale_rule.h)
        st->report.scaleBefore = st->scale.scale;
        updateLossScale(st->scale, st->rule, finite);
        st->report.scaleAfter = st->scale;
      }
    }
    *counter = 0;  // ready for the next step
  }
}

// Launch 2: one block per chunk, nothing when skipped.
__global__ void __launch_bounds__(kThreads)
    updateKernel(const FusedTensor* tensors, const FusedChunk* chunks, FusedHyper h,
                 const float* coeff, const DeviceState* st, int deferred) {
  if (st->report.skip) return;
  if (deferred) {
    readScalars(h, st);
    h.gradScale = st->gradScaleUsed;  // the scale may have grown after launch 1 read it
  }
  const FusedChunk c = chunks[blockIdx.x];
  const FusedTensor t = tensorAt(tensors, c.tensor, st, deferred);
  const float cf = coeff[c.tensor];
#pragma unroll 4
  for (int64_t i = c.begin + threadIdx.x; i < c.end; i += blockDim.x) fused::update(h, t, i, cf);
}

__global__ void writeScalars(DeviceState* st, FusedStepScalars v) { st->scalars = v; }

__global__ void writeScale(DeviceState* st, LossScaleRule rule, LossScalerState state) {
  st->rule = rule;
  st->scale = state;
  st->scaleAttached = 1;
  st->report.scaleBefore = state.scale;
  st->report.scaleAfter = state;
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
  unsigned int* counter = nullptr;
  // Kept across re-allocations of the tables: the step's state (the loss
  // scale among it), its pinned report, and the deferred form's events.
  DeviceState* state = nullptr;
  Report* reportHost = nullptr;  // pinned
  cudaEvent_t launched = nullptr, tableUploaded = nullptr;
  bool pending = false, tableInFlight = false;
  std::vector<FusedTensor> uploaded;  // the table on the device (deferred form)

  void freeTables() {
    cudaFree(chunks);
    cudaFree(firstChunk);
    cudaFree(tensors);
    cudaFreeHost(tensorsHost);
    cudaFree(partials);
    cudaFree(coeff);
    cudaFree(counter);
    chunks = nullptr;
    firstChunk = nullptr;
    tensors = nullptr;
    tensorsHost = nullptr;
    partials = nullptr;
    coeff = nullptr;
    counter = nullptr;
    numels.clear();
    nChunks = 0;
    tensorCapacity = 0;
    uploaded.clear();
  }

  void ensureState(cudaStream_t stream) {
    if (state) return;
    check(cudaMalloc(&state, sizeof(DeviceState)), "cudaMalloc");
    check(cudaMemsetAsync(state, 0, sizeof(DeviceState), stream), "cudaMemset");
    check(cudaMallocHost(&reportHost, sizeof(Report)), "cudaMallocHost");
    check(cudaEventCreateWithFlags(&launched, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventCreateWithFlags(&tableUploaded, cudaEventDisableTiming), "cudaEventCreate");
  }

  // New chunk and tensor tables for these tensors' sizes (the first step,
  // or another set of tensors); waits for the stream.
  void allocateTables(const std::vector<FusedTensor>& tensors, std::vector<int64_t> sizes,
                      cudaStream_t stream) {
    check(cudaStreamSynchronize(stream), "waiting before re-allocation");
    freeTables();
    const std::vector<FusedChunk> table = fusedChunks(sizes);
    std::vector<int32_t> first(sizes.size() + 1, 0);
    for (const auto& c : table) ++first[c.tensor + 1];
    for (size_t t = 0; t < sizes.size(); ++t) first[t + 1] += first[t];
    nChunks = static_cast<int>(table.size());
    const size_t n = tensors.size();
    check(cudaMalloc(&chunks, std::max<size_t>(1, table.size()) * sizeof(FusedChunk)),
          "cudaMalloc");
    check(cudaMalloc(&firstChunk, first.size() * sizeof(int32_t)), "cudaMalloc");
    check(cudaMalloc(&this->tensors, std::max<size_t>(1, n) * sizeof(FusedTensor)), "cudaMalloc");
    check(cudaMallocHost(&tensorsHost, std::max<size_t>(1, n) * sizeof(FusedTensor)),
          "cudaMallocHost");
    check(cudaMalloc(&partials, std::max<size_t>(1, table.size()) * 3 * sizeof(double)),
          "cudaMalloc");
    check(cudaMalloc(&coeff, std::max<size_t>(1, n) * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&counter, sizeof(unsigned int)), "cudaMalloc");
    check(cudaMemsetAsync(counter, 0, sizeof(unsigned int), stream), "cudaMemset");
    check(cudaMemcpyAsync(chunks, table.data(), table.size() * sizeof(FusedChunk),
                          cudaMemcpyHostToDevice, stream),
          "uploading the chunk table");
    check(cudaMemcpyAsync(firstChunk, first.data(), first.size() * sizeof(int32_t),
                          cudaMemcpyHostToDevice, stream),
          "uploading the chunk table");
    check(cudaStreamSynchronize(stream), "uploading the chunk table");  // `table` goes away
    numels = std::move(sizes);
    tensorCapacity = n;
  }

  void launchKernels(const FusedHyper& h, int nTensors, int deferred, cudaStream_t stream) {
    normsKernel<<<nChunks, kThreads, 0, stream>>>(tensors, nTensors, chunks, firstChunk, h,
                                                  partials, coeff, state, counter, deferred);
    check(cudaGetLastError(), "the norms launch");
    updateKernel<<<nChunks, kThreads, 0, stream>>>(tensors, chunks, h, coeff, state, deferred);
    check(cudaGetLastError(), "the update launch");
    check(cudaMemcpyAsync(reportHost, &state->report, sizeof(Report), cudaMemcpyDeviceToHost,
                          stream),
          "reading the outcome");
  }

  void freeAll() {
    freeTables();
    cudaFree(state);
    cudaFreeHost(reportHost);
    if (launched) cudaEventDestroy(launched);
    if (tableUploaded) cudaEventDestroy(tableUploaded);
    state = nullptr;
    reportHost = nullptr;
    launched = tableUploaded = nullptr;
  }
};

namespace {

std::vector<int64_t> sizesOf(const std::vector<FusedTensor>& tensors) {
  std::vector<int64_t> numels;
  for (const auto& t : tensors) numels.push_back(t.g ? t.numel : 0);
  return numels;
}

}  // namespace

FusedCudaStep::FusedCudaStep() : s_(std::make_unique<State>()) {}

FusedCudaStep::~FusedCudaStep() { s_->freeAll(); }

FusedOutcome FusedCudaStep::run(const std::vector<FusedTensor>& tensors, const FusedHyper& h,
                                void* streamHandle) {
  const auto stream = static_cast<cudaStream_t>(streamHandle);
  State& s = *s_;
  s.ensureState(stream);
  std::vector<int64_t> numels = sizesOf(tensors);
  if (numels != s.numels) s.allocateTables(tensors, std::move(numels), stream);
  s.uploaded.clear();  // the deferred form uploads its own table again
  FusedOutcome out;
  if (s.nChunks == 0) return out;
  // The previous step's sync guarantees its upload is done: the pinned
  // source may be rewritten.
  std::memcpy(s.tensorsHost, tensors.data(), tensors.size() * sizeof(FusedTensor));
  check(cudaMemcpyAsync(s.tensors, s.tensorsHost, tensors.size() * sizeof(FusedTensor),
                        cudaMemcpyHostToDevice, stream),
        "uploading the tensor table");
  s.launchKernels(h, static_cast<int>(tensors.size()), /*deferred=*/0, stream);
  check(cudaStreamSynchronize(stream), "the fused step");
  out.gradNormSq = s.reportHost->gradNormSq;
  out.applied = s.reportHost->skip == 0;
  return out;
}

void FusedCudaStep::attachLossScale(const LossScaleRule& rule, const LossScalerState& state,
                                    void* streamHandle) {
  const auto stream = static_cast<cudaStream_t>(streamHandle);
  s_->ensureState(stream);
  writeScale<<<1, 1, 0, stream>>>(s_->state, rule, state);
  check(cudaGetLastError(), "writing the loss scale");
}

void FusedCudaStep::setScalars(const FusedStepScalars& v, void* streamHandle) {
  const auto stream = static_cast<cudaStream_t>(streamHandle);
  s_->ensureState(stream);
  // The values travel as a launch parameter: no host buffer that a later
  // step could rewrite before this one has read it.
  writeScalars<<<1, 1, 0, stream>>>(s_->state, v);
  check(cudaGetLastError(), "writing the step's values");
}

void FusedCudaStep::prepare(const std::vector<FusedTensor>& tensors, void* streamHandle) {
  const auto stream = static_cast<cudaStream_t>(streamHandle);
  State& s = *s_;
  s.ensureState(stream);
  std::vector<int64_t> numels = sizesOf(tensors);
  if (numels != s.numels) s.allocateTables(tensors, std::move(numels), stream);
  if (s.nChunks == 0) return;
  if (s.uploaded.size() == tensors.size() &&
      std::memcmp(s.uploaded.data(), tensors.data(), tensors.size() * sizeof(FusedTensor)) == 0) {
    return;  // the steady state: the same pointers, multipliers and decays
  }
  // The pinned source of the last upload may still be read by its copy.
  if (s.tableInFlight) check(cudaEventSynchronize(s.tableUploaded), "the last table upload");
  std::memcpy(s.tensorsHost, tensors.data(), tensors.size() * sizeof(FusedTensor));
  check(cudaMemcpyAsync(s.tensors, s.tensorsHost, tensors.size() * sizeof(FusedTensor),
                        cudaMemcpyHostToDevice, stream),
        "uploading the tensor table");
  check(cudaEventRecord(s.tableUploaded, stream), "cudaEventRecord");
  s.tableInFlight = true;
  s.uploaded = tensors;
}

void FusedCudaStep::launch(const FusedHyper& h, void* streamHandle) {
  State& s = *s_;
  if (s.nChunks == 0) return;
  s.launchKernels(h, static_cast<int>(s.uploaded.size()), /*deferred=*/1,
                  static_cast<cudaStream_t>(streamHandle));
}

void FusedCudaStep::markLaunched(void* streamHandle) {
  State& s = *s_;
  if (s.nChunks == 0) return;
  check(cudaEventRecord(s.launched, static_cast<cudaStream_t>(streamHandle)), "cudaEventRecord");
  s.pending = true;
}

bool FusedCudaStep::pending() const { return s_->pending; }

FusedSettled FusedCudaStep::settle() {
  State& s = *s_;
  FusedSettled out;
  if (!s.pending) return out;
  check(cudaEventSynchronize(s.launched), "the fused step");
  s.pending = false;
  const Report& r = *s.reportHost;
  out.applied = r.skip == 0;
  out.gradNormSq = r.gradNormSq;
  out.scaleBefore = r.scaleBefore;
  out.scaleAfter = r.scaleAfter;
  return out;
}

double* FusedCudaStep::lossScaleOnDevice() {
  return s_->state ? &s_->state->scale.scale : nullptr;
}

int32_t* FusedCudaStep::skippedOnDevice() { return s_->state ? &s_->state->report.skip : nullptr; }

}  // namespace bigbatch::optim_detail
