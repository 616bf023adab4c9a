// The element rules and per-tensor coefficients of the fused step
// (fused_step.h), written once for host and device: the same arithmetic,
// in the same order and types, as the CPU optimizers' loops (multi_tensor.cpp,
// sgd.cpp, lars.cpp, lamb.cpp), so the GPU step differs from the CPU one
// only by the order in which norms are summed (and FMA contraction).
//
// Header-only, no torch, no CUDA header: included by fused_step.cpp (g++)
// and cuda/fused_step.cu (nvcc).
#pragma once

#include <cmath>
#include <cstdint>

#include "fused_step.h"

#ifdef __CUDACC__
#define BIGBATCH_HD __host__ __device__ __forceinline__
#else
#define BIGBATCH_HD inline
#endif

namespace bigbatch::optim_detail::fused {

// LAMB's update direction from the current moments, and the moments this
// step writes (lamb.cpp's lambDirection).
BIGBATCH_HD float lambDirection(float w, float gRaw, float m, float v, const FusedHyper& h,
                                float decay, float* mOut, float* vOut) {
  const float g = h.gradScale * gRaw;
  const float mi = h.beta1 * m + (1.0f - h.beta1) * g;
  const float vi = h.beta2 * v + (1.0f - h.beta2) * g * g;
  *mOut = mi;
  *vOut = vi;
  return (mi / h.bias1) / (sqrtf(vi / h.bias2) + h.lambEpsilon) + decay * w;
}

// Pass 1, one element: adds its squares to s[0..width). SGD: s[0] = (gs·g)²;
// LARS: s[0] = w², s[1] = (gs·g)²; LAMB: s[0] = w², s[1] = u², s[2] = (gs·g)².
BIGBATCH_HD void accumulate(const FusedHyper& h, const FusedTensor& t, int64_t i, double* s) {
  const double y = static_cast<double>(h.gradScale * t.g[i]);
  switch (h.rule) {
    case FusedRule::kSgd:
      s[0] += y * y;
      return;
    case FusedRule::kLars: {
      const double x = t.w[i];
      s[0] += x * x;
      s[1] += y * y;
      return;
    }
    case FusedRule::kLamb: {
      float mi, vi;
      const double u =
          lambDirection(t.w[i], t.g[i], t.b0[i], t.b1[i], h, static_cast<float>(t.decay), &mi, &vi);
      const double x = t.w[i];
      s[0] += x * x;
      s[1] += u * u;
      s[2] += y * y;
      return;
    }
  }
}

// The tensor's coefficient from its summed squares `n` (width values), in
// double as the CPU optimizers compute it. SGD: lr. LARS: lr·η·|w| /
// (|g| + λ·|w| + ε). LAMB: lr·φ(|w|) / |u|. Trust 1 when not adapted or a
// norm is 0.
BIGBATCH_HD float coefficient(const FusedHyper& h, const FusedTensor& t, const double* n) {
  double trust = 1.0;
  if (h.rule == FusedRule::kLars && t.adapt) {
    const double w = sqrt(n[0]), g = sqrt(n[1]);
    if (w != 0 && g != 0) trust = h.eta * w / (g + t.decay * w + h.epsilon);
  } else if (h.rule == FusedRule::kLamb && t.adapt) {
    const double w = sqrt(n[0]), u = sqrt(n[1]);
    if (w != 0 && u != 0) {
      const double phi = fmax(w, h.phiMin);
      trust = (h.phiMax > 0 ? fmin(phi, h.phiMax) : phi) / u;
    }
  }
  return static_cast<float>(t.lr * trust);
}

// The squared gradient norm's column of a rule's partials.
BIGBATCH_HD int gradColumn(FusedRule rule) {
  return rule == FusedRule::kSgd ? 0 : rule == FusedRule::kLars ? 1 : 2;
}

// Pass 2, one element, with the tensor's coefficient c.
BIGBATCH_HD void update(const FusedHyper& h, const FusedTensor& t, int64_t i, float c) {
  switch (h.rule) {
    case FusedRule::kSgd: {
      const float d = h.gradScale * t.g[i] + static_cast<float>(t.decay) * t.w[i];
      const float vi = h.momentum * t.b0[i] + d;
      t.b0[i] = vi;
      t.w[i] -= c * (h.nesterov ? d + h.momentum * vi : vi);
      return;
    }
    case FusedRule::kLars: {
      const float vi =
          h.momentum * t.b0[i] + c * (h.gradScale * t.g[i] + static_cast<float>(t.decay) * t.w[i]);
      t.b0[i] = vi;
      t.w[i] -= vi;
      return;
    }
    case FusedRule::kLamb: {
      float mi, vi;
      const float u =
          lambDirection(t.w[i], t.g[i], t.b0[i], t.b1[i], h, static_cast<float>(t.decay), &mi, &vi);
      t.b0[i] = mi;
      t.b1[i] = vi;
      t.w[i] -= c * u;
      return;
    }
  }
}

}  // namespace bigbatch::optim_detail::fused
