// The dynamic loss scaler's rule after one step (loss_scaler.h), written
// once for the host and the device: DynamicLossScaler::update() runs it on
// the host; on a GPU the fused optimizer step's last block runs it on the
// scale state in device memory (src/optim/cuda/fused_step.cu), as PyTorch's
// GradScaler does with _amp_update_scale_, so the host never waits for a
// step's outcome to know the next step's scale. The same arithmetic in the
// same types either way: the two states stay equal step for step.
//
// Plain C++ (no torch, no CUDA header): compiled by g++ and nvcc alike.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define BIGBATCH_LOSS_SCALE_HD __host__ __device__ inline
#else
#define BIGBATCH_LOSS_SCALE_HD inline
#endif

namespace bigbatch {

// Everything a checkpoint needs to continue the scaler bit-exactly.
struct LossScalerState {
  double scale = 65536.0;
  int64_t cleanSteps = 0;     // clean steps since the last growth or overflow
  int64_t overflowsLeft = 1;  // overflowing steps left before the next back-off
};

// LossScalerOptions without the initial scale: what each step's update reads.
struct LossScaleRule {
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  int64_t growthInterval = 2000;
  double minScale = 1.0;
  double maxScale = 16777216.0;
  int64_t hysteresis = 1;
};

// clean   -> count it; after growthInterval clean steps in a row the scale
//            grows by growthFactor (at most maxScale);
// inf/NaN -> after `hysteresis` such steps since the last growth or
//            back-off, it shrinks by backoffFactor (at least minScale).
// Returns `finite`: whether the step's update may be applied.
BIGBATCH_LOSS_SCALE_HD bool updateLossScale(LossScalerState& s, const LossScaleRule& r,
                                            bool finite) {
  if (finite) {
    if (++s.cleanSteps >= r.growthInterval) {
      const double grown = s.scale * r.growthFactor;
      s.scale = grown < r.maxScale ? grown : r.maxScale;
      s.cleanSteps = 0;
      s.overflowsLeft = r.hysteresis;
    }
    return true;
  }
  s.cleanSteps = 0;
  if (--s.overflowsLeft <= 0) {
    const double shrunk = s.scale * r.backoffFactor;
    s.scale = shrunk > r.minScale ? shrunk : r.minScale;
    s.overflowsLeft = r.hysteresis;
  }
  return false;
}

}  // namespace bigbatch
