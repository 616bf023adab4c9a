// Low-precision compute with fp32 master weights (Micikevicius et al. 2018;
// the fp16 compute of the 2048-GPU ImageNet records).
//
// The model's parameters stay fp32 — they are the master weights the
// optimizer updates, and their gradients are fp32 (the exchange buckets).
// Inside an AutocastScope, libtorch's autocast runs the ops that have a fast
// low-precision kernel (convolution, linear/matmul) on a low-precision copy
// of their inputs and weights, made from the current masters at each use;
// autograd converts each use's weight gradient back to fp32 before it is
// accumulated, so the sum over micro-batches and BatchNorm groups stays fp32.
// The copy is never cached across an optimizer step (the cast cache is off),
// so every forward sees the masters of the latest step.
//
// On CPU, libtorch 1.13's autocast supports bf16 only; fp16 compute needs a
// CUDA device (fp16 on the wire works everywhere: ddp.exchange_dtype).
// docs/MIXED_PRECISION.md lists which ops run in which type here; BatchNorm
// keeps fp32 parameters and running statistics.
//
// Threading: autocast state is thread-local; an AutocastScope affects the
// thread that made it (the trainer's compute thread) until it is destroyed.
#pragma once

#include <torch/torch.h>

#include <string>

namespace bigbatch {

enum class Precision { kFp32, kBf16, kFp16 };

// "fp32" | "bf16" | "fp16"; throws InvalidArgument otherwise.
Precision parsePrecision(const std::string& name);
const char* precisionName(Precision p);
// The compute type: kFloat, kBFloat16 or kHalf.
c10::ScalarType computeType(Precision p);

// Throws InvalidArgument, naming the fix, when `device` cannot compute in `p`
// with this libtorch (fp16 on CPU).
void checkPrecisionSupported(Precision p, c10::DeviceType device);

// Enables autocast to `p` on `device` for this thread while alive (a no-op
// for fp32) and restores the previous autocast state afterwards.
class AutocastScope {
 public:
  AutocastScope(Precision p, c10::DeviceType device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_;
  bool wasEnabled_ = false;
  c10::ScalarType previousType_ = c10::ScalarType::Float;
  bool previousCache_ = true;
};

// The first floating-point parameter or buffer of `module` that is not fp32,
// as "name (dtype)"; empty when all are (the master-weight invariant).
std::string firstNonFp32State(const torch::nn::Module& module);

}  // namespace bigbatch
