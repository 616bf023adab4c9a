#include "multi_tensor.h"

#include <cmath>

namespace bigbatch::optim_detail {

MultiTensorPlan::MultiTensorPlan(const std::vector<int64_t>& numels) {
  firstChunk_.push_back(0);
  for (size_t t = 0; t < numels.size(); ++t) {
    for (int64_t b = 0; b < numels[t]; b += kChunkElements) {
      chunks_.push_back({static_cast<int32_t>(t), b, std::min(numels[t], b + kChunkElements)});
      chunkStart_.push_back(total_ + b);
    }
    total_ += numels[t];
    firstChunk_.push_back(chunks_.size());
  }
}

const std::vector<size_t>& MultiTensorPlan::boundsFor(int threads) const {
  if (boundsThreads_ != threads) {
    // Thread i starts at the first chunk that begins at or after i/threads of
    // the elements.
    bounds_.assign(threads + 1, chunks_.size());
    size_t c = 0;
    for (int i = 0; i < threads; ++i) {
      const int64_t start = total_ * i / threads;
      while (c < chunks_.size() && chunkStart_[c] < start) ++c;
      bounds_[i] = c;
    }
    boundsThreads_ = threads;
  }
  return bounds_;
}

void MultiTensorPlan::reduce(const std::vector<double>& partials, int width,
                             std::vector<double>& out) const {
  out.assign(tensors() * width, 0.0);
  for (size_t t = 0; t < tensors(); ++t) {
    for (size_t c = firstChunk_[t]; c < firstChunk_[t + 1]; ++c) {
      for (int k = 0; k < width; ++k) out[t * width + k] += partials[c * width + k];
    }
  }
}

namespace kernels {

#define BIGBATCH_MULTIVERSION __attribute__((target_clones("avx2", "default")))

// Eight independent lanes per sum so the loop vectorises without
// -ffast-math; the lanes are folded in a fixed order.
BIGBATCH_MULTIVERSION
void sumSquares(const float* __restrict a, const float* __restrict b, int64_t n, double* s) {
  double la[8] = {}, lb[8] = {};
  int64_t i = 0;
  if (b) {
    for (; i + 8 <= n; i += 8) {
      for (int k = 0; k < 8; ++k) {
        const double x = a[i + k], y = b[i + k];
        la[k] += x * x;
        lb[k] += y * y;
      }
    }
  } else {
    for (; i + 8 <= n; i += 8) {
      for (int k = 0; k < 8; ++k) {
        const double x = a[i + k];
        la[k] += x * x;
      }
    }
  }
  for (int k = 0; i < n; ++i, ++k) {
    const double x = a[i];
    la[k] += x * x;
    if (b) {
      const double y = b[i];
      lb[k] += y * y;
    }
  }
  double sa = 0, sb = 0;
  for (int k = 0; k < 8; ++k) {
    sa += la[k];
    sb += lb[k];
  }
  s[0] += sa;
  if (b) s[1] += sb;
}

BIGBATCH_MULTIVERSION
void sgdUpdate(float* __restrict w, const float* __restrict g, float* __restrict v, int64_t n,
               float lr, float m, float wd, bool nesterov, float gs) {
  if (nesterov) {
    for (int64_t i = 0; i < n; ++i) {
      const float d = gs * g[i] + wd * w[i];
      const float vi = m * v[i] + d;
      v[i] = vi;
      w[i] -= lr * (d + m * vi);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float vi = m * v[i] + (gs * g[i] + wd * w[i]);
      v[i] = vi;
      w[i] -= lr * vi;
    }
  }
}

BIGBATCH_MULTIVERSION
void larsUpdate(float* __restrict w, const float* __restrict g, float* __restrict v, int64_t n,
                float m, float c, float wd, float gs, double* wNormSq) {
  if (!wNormSq) {
    for (int64_t i = 0; i < n; ++i) {
      const float vi = m * v[i] + c * (gs * g[i] + wd * w[i]);
      v[i] = vi;
      w[i] -= vi;
    }
    return;
  }
  // The lanes, tail and fold of sumSquares(), applied to the values written.
  double lw[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const float vi = m * v[i + k] + c * (gs * g[i + k] + wd * w[i + k]);
      const float wi = w[i + k] - vi;
      v[i + k] = vi;
      w[i + k] = wi;
      const double x = wi;
      lw[k] += x * x;
    }
  }
  for (int k = 0; i < n; ++i, ++k) {
    const float vi = m * v[i] + c * (gs * g[i] + wd * w[i]);
    const float wi = w[i] - vi;
    v[i] = vi;
    w[i] = wi;
    const double x = wi;
    lw[k] += x * x;
  }
  double s = 0;
  for (int k = 0; k < 8; ++k) s += lw[k];
  *wNormSq += s;
}

namespace {
// The one definition of LAMB's direction, shared by both passes so they agree
// to the bit.
inline float lambDirection(float w, float gScaled, float m, float v, const LambCoefficients& k,
                           float* mOut, float* vOut) {
  const float g = k.gs * gScaled;
  const float mi = k.beta1 * m + (1.0f - k.beta1) * g;
  const float vi = k.beta2 * v + (1.0f - k.beta2) * g * g;
  *mOut = mi;
  *vOut = vi;
  return (mi / k.bias1) / (std::sqrt(vi / k.bias2) + k.epsilon) + k.wd * w;
}
}  // namespace

BIGBATCH_MULTIVERSION
void lambNorms(const float* __restrict w, const float* __restrict g, const float* __restrict m,
               const float* __restrict v, int64_t n, const LambCoefficients& k, double* s) {
  double lw[8] = {}, lu[8] = {}, lg[8] = {};
  int64_t i = 0;
  float mi, vi;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const double u = lambDirection(w[i + j], g[i + j], m[i + j], v[i + j], k, &mi, &vi);
      const double x = w[i + j], y = k.gs * g[i + j];
      lw[j] += x * x;
      lu[j] += u * u;
      lg[j] += y * y;
    }
  }
  for (int j = 0; i < n; ++i, ++j) {
    const double u = lambDirection(w[i], g[i], m[i], v[i], k, &mi, &vi);
    const double x = w[i], y = k.gs * g[i];
    lw[j] += x * x;
    lu[j] += u * u;
    lg[j] += y * y;
  }
  double sw = 0, su = 0, sg = 0;
  for (int j = 0; j < 8; ++j) {
    sw += lw[j];
    su += lu[j];
    sg += lg[j];
  }
  s[0] += sw;
  s[1] += su;
  s[2] += sg;
}

BIGBATCH_MULTIVERSION
void lambUpdate(float* __restrict w, const float* __restrict g, float* __restrict m,
                float* __restrict v, int64_t n, const LambCoefficients& k, float c) {
  for (int64_t i = 0; i < n; ++i) {
    float mi, vi;
    const float u = lambDirection(w[i], g[i], m[i], v[i], k, &mi, &vi);
    m[i] = mi;
    v[i] = vi;
    w[i] -= c * u;
  }
}

}  // namespace kernels
}  // namespace bigbatch::optim_detail
