#include "bigbatch/amp/precision.h"

#include <ATen/autocast_mode.h>

#include "bigbatch/common/error.h"
#include "bigbatch/common/torch_compat.h"

namespace bigbatch {

Precision parsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  BIGBATCH_THROW(InvalidArgument, "precision '{}' is not one of fp32, bf16, fp16", name);
}

const char* precisionName(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

c10::ScalarType computeType(Precision p) {
  switch (p) {
    case Precision::kBf16: return c10::ScalarType::BFloat16;
    case Precision::kFp16: return c10::ScalarType::Half;
    case Precision::kFp32: break;
  }
  return c10::ScalarType::Float;
}

void checkPrecisionSupported(Precision p, c10::DeviceType device) {
  BIGBATCH_REQUIRE(
      !(p == Precision::kFp16 && device == c10::DeviceType::CPU), InvalidArgument,
      "amp.precision = fp16 needs a CUDA device: libtorch 1.13's CPU autocast computes "
      "in bf16 only. On CPU use amp.precision = bf16 (same 16-bit speed-up, fp32's "
      "range), or keep fp32 compute and send fp16 on the wire with "
      "ddp.exchange_dtype = fp16");
  BIGBATCH_REQUIRE(
      device == c10::DeviceType::CPU || device == c10::DeviceType::CUDA || p == Precision::kFp32,
      InvalidArgument, "amp.precision = {} is supported on CPU and CUDA devices only, not {}",
      precisionName(p), c10::DeviceTypeName(device));
}

AutocastScope::AutocastScope(Precision p, c10::DeviceType device) : device_(device) {
  if (p == Precision::kFp32) return;
  checkPrecisionSupported(p, device);
  active_ = true;
  previousCache_ = at::autocast::is_autocast_cache_enabled();
  // No cast cache: each use casts the current master, so a copy can never
  // outlive the optimizer step that changed its master (see precision.h).
  at::autocast::set_autocast_cache_enabled(false);
  wasEnabled_ = compat::autocastEnabled(device);
  previousType_ = compat::autocastType(device);
  compat::setAutocastType(device, computeType(p));
  compat::setAutocastEnabled(device, true);
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  compat::setAutocastEnabled(device_, wasEnabled_);
  compat::setAutocastType(device_, previousType_);
  at::autocast::set_autocast_cache_enabled(previousCache_);
}

std::string firstNonFp32State(const torch::nn::Module& module) {
  for (const auto& item : module.named_parameters()) {
    if (item.value().scalar_type() != torch::kFloat) {
      return item.key() + " (" + std::string(c10::toString(item.value().scalar_type())) + ")";
    }
  }
  for (const auto& item : module.named_buffers()) {
    const auto t = item.value().scalar_type();
    if (c10::isFloatingType(t) && t != torch::kFloat) {
      return item.key() + " (" + std::string(c10::toString(t)) + ")";
    }
  }
  return {};
}

}  // namespace bigbatch
