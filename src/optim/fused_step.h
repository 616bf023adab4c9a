// The fused multi-tensor optimizer step for device memory (Fujitsu's
// "one batched pass for every layer's norm", Yamazaki et al. 2019; the
// multi-tensor apply of NVIDIA Apex): every layer's norms in one launch,
// every layer's update in a second, whatever the number of tensors.
//
// The element space of all tensors is cut into chunks of kFusedChunk values
// (each inside one tensor). Launch 1 (norms), one block per chunk: the
// chunk's sums of squares — of w and g for LARS, of w, the update u and g
// for LAMB, of g for SGD — in double; the last block to finish (a counter)
// adds each tensor's chunk partials in chunk order (deterministic), turns
// them into that tensor's coefficient (lr · trust ratio) and sums the
// global |g|²: a non-finite sum marks the step skipped. Launch 2 (update),
// one block per chunk: nothing if skipped, else the rule's element update
// with its tensor's coefficient. Bytes per value: LARS reads w, g (8) then
// reads w, g, v and writes w, v (20); LAMB 16 + 28; SGD 4 + 20.
//
// The element rules (fused_rules.h) are the same functions on host and
// device; fusedStepOnHost() runs them serially over the same chunk table
// (each chunk's squares summed in element order, where a block sums them
// as a tree), which is how the algorithm is tested without a GPU (against
// the CPU optimizers' values), and what the CUDA test compares the kernels
// to.
//
// Plain C++ (no torch, no CUDA header): compiled by g++ and nvcc alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bigbatch::optim_detail {

constexpr int64_t kFusedChunk = int64_t{1} << 15;  // values per chunk (128 KiB of fp32)

enum class FusedRule : int32_t { kSgd = 0, kLars = 1, kLamb = 2 };

// One tensor of the step. `b0`, `b1`: the optimizer's state (SGD/LARS:
// momentum in b0; LAMB: first and second moments). `g` null: no gradient,
// the tensor is skipped.
struct FusedTensor {
  float* w = nullptr;
  const float* g = nullptr;
  float* b0 = nullptr;
  float* b1 = nullptr;
  int64_t numel = 0;
  double lr = 0;  // this tensor's group lr (excluded: lr × excluded_lr_scale)
  double decay =
      0;  // its group weight decay (the trust ratio's λ in double, the update's in float)
  int32_t adapt = 0;  // 1: LARS/LAMB trust ratio; 0: ratio 1 (excluded)
};

struct FusedHyper {
  FusedRule rule = FusedRule::kSgd;
  float momentum = 0;
  int32_t nesterov = 0;  // SGD
  double eta = 0.001;    // LARS trust coefficient
  double epsilon = 0;    // LARS ε
  // LAMB: β1, β2, the bias corrections 1 − β^t, ε, and the clamp φ of |w|
  // (phiMax 0: none).
  float beta1 = 0.9f, beta2 = 0.999f, bias1 = 1, bias2 = 1, lambEpsilon = 1e-6f;
  double phiMin = 0, phiMax = 0;
  float gradScale = 1;  // every gradient is read as gradScale · g (1 / loss scale)
};

// What changes from step to step in the deferred form of the device step
// (cuda/fused_step_cuda.h), read from device memory. Its tensor table
// holds each tensor's multipliers — its group's lr factor (1, or the
// excluded group's) and its group's weight decay — which the kernels
// multiply by `lr` and `decayScale` (the same double products
// Optimizer::group() forms on the host).
struct FusedStepScalars {
  double lr = 1, decayScale = 1;
  float momentum = 0;
  float bias1 = 1, bias2 = 1;  // LAMB
  float gradScale = 1;         // without an attached loss scale
};

struct FusedChunk {
  int32_t tensor;
  int64_t begin, end;  // element range inside the tensor
};

// The chunk table of `numels` (tensors with numel 0 get no chunk).
inline std::vector<FusedChunk> fusedChunks(const std::vector<int64_t>& numels) {
  std::vector<FusedChunk> chunks;
  for (std::size_t t = 0; t < numels.size(); ++t) {
    for (int64_t b = 0; b < numels[t]; b += kFusedChunk) {
      const int64_t end = numels[t] - b > kFusedChunk ? b + kFusedChunk : numels[t];
      chunks.push_back({static_cast<int32_t>(t), b, end});
    }
  }
  return chunks;
}

struct FusedOutcome {
  bool applied = true;    // false: a non-finite gradient; nothing was written
  double gradNormSq = 0;  // global |gradScale · g|²
};

// The whole step on the host, serially, with the device kernels' rules.
// `tensors` point to host memory.
FusedOutcome fusedStepOnHost(const std::vector<FusedTensor>& tensors, const FusedHyper& h);

}  // namespace bigbatch::optim_detail
