#include "fused_step.h"

#include <cmath>

#include "fused_rules.h"

namespace bigbatch::optim_detail {

FusedOutcome fusedStepOnHost(const std::vector<FusedTensor>& tensors, const FusedHyper& h) {
  const int width = fused::gradColumn(h.rule) + 1;
  std::vector<int64_t> numels;
  for (const auto& t : tensors) numels.push_back(t.g ? t.numel : 0);
  const std::vector<FusedChunk> chunks = fusedChunks(numels);
  // Pass 1: per-chunk partials, then per-tensor sums in chunk order.
  std::vector<double> norms(tensors.size() * width, 0.0);
  for (const FusedChunk& c : chunks) {
    double partial[3] = {0, 0, 0};
    for (int64_t i = c.begin; i < c.end; ++i) fused::accumulate(h, tensors[c.tensor], i, partial);
    for (int k = 0; k < width; ++k) norms[c.tensor * width + k] += partial[k];
  }
  FusedOutcome out;
  std::vector<float> coeff(tensors.size(), 0.0f);
  for (size_t t = 0; t < tensors.size(); ++t) {
    out.gradNormSq += norms[t * width + fused::gradColumn(h.rule)];
    if (tensors[t].g) coeff[t] = fused::coefficient(h, tensors[t], &norms[t * width]);
  }
  if (!std::isfinite(out.gradNormSq)) {
    out.applied = false;
    return out;
  }
  // Pass 2.
  for (const FusedChunk& c : chunks) {
    for (int64_t i = c.begin; i < c.end; ++i)
      fused::update(h, tensors[c.tensor], i, coeff[c.tensor]);
  }
  return out;
}

}  // namespace bigbatch::optim_detail
