// torch_compat: the libtorch C++ calls that differ between the two builds —
// the default CPU build on Debian's libtorch 1.13 and the CUDA build on a
// PyTorch 2.x wheel (docs/GPU.md). Everything else compiles unchanged
// against both; code that needs one of these goes through here, so the
// version test lives in one place.
//
// Threading: free functions; autocast state is per thread (as in ATen).
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/core/Stream.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <variant>

namespace bigbatch::compat {

// libtorch 2.x replaced c10::variant with std::variant (c10::get_if and
// c10::holds_alternative are gone).
#if TORCH_VERSION_MAJOR >= 2
template <class T, class V>
const T* getIf(const V* v) {
  return std::get_if<T>(v);
}
template <class T, class V>
bool holdsAlternative(const V& v) {
  return std::holds_alternative<T>(v);
}
#else
template <class T, class V>
const T* getIf(const V* v) {
  return c10::get_if<T>(v);
}
template <class T, class V>
bool holdsAlternative(const V& v) {
  return c10::holds_alternative<T>(v);
}
#endif

// Autocast per device type: 1.13 has one call per device (cpu / gpu), 2.x
// one call taking the device type (the old ones are deprecated there).
inline bool autocastEnabled(c10::DeviceType device) {
#if TORCH_VERSION_MAJOR >= 2
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled()
                                        : at::autocast::is_enabled();
#endif
}

inline void setAutocastEnabled(c10::DeviceType device, bool enabled) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
  } else {
    at::autocast::set_enabled(enabled);
  }
#endif
}

inline c10::ScalarType autocastType(c10::DeviceType device) {
#if TORCH_VERSION_MAJOR >= 2
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                        : at::autocast::get_autocast_gpu_dtype();
#endif
}

inline void setAutocastType(c10::DeviceType device, c10::ScalarType type) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(device, type);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_autocast_cpu_dtype(type);
  } else {
    at::autocast::set_autocast_gpu_dtype(type);
  }
#endif
}

// The platform handle of a stream (a cudaStream_t on CUDA), for libraries
// that take one (NCCL). libtorch 2.x has Stream::native_handle(); 1.13's
// generic Stream has none — and its build here is CPU-only, where no code
// asks for one.
inline void* nativeHandle(const c10::Stream& stream) {
#if TORCH_VERSION_MAJOR >= 2
  return stream.native_handle();
#else
  TORCH_CHECK(false, "the native handle of a ", stream.device().str(),
              " stream needs libtorch 2.x (the CUDA build)");
  return nullptr;
#endif
}

}  // namespace bigbatch::compat
