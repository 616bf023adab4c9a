// The differences between the PyTorch versions the torch.distributed
// backend is built against, in one place: Debian's PyTorch 1.13 (a backend
// is a c10d::ProcessGroup) and PyTorch 2.x (a c10d::Backend, which torch
// wraps in a ProcessGroup and picks by device). intel/torch-ccl keeps the
// same split behind one #if (src/ProcessGroupCCL.hpp).
//
// Header only; no state.
#pragma once

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace bigbatch::torch_backend {

// c10d::Backend::shutdown(), which destroy_process_group calls: PyTorch
// 2.7 and later (2.1-2.6 stop a group when its last reference goes).
#define BIGBATCH_TORCH_HAS_BACKEND_SHUTDOWN \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 7))

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = ::c10d::Backend;
// The Python class a backend object derives from, in torch._C._distributed_c10d.
inline constexpr const char* kPythonBaseClass = "Backend";
#else
using BackendBase = ::c10d::ProcessGroup;
inline constexpr const char* kPythonBaseClass = "ProcessGroup";
#endif

}  // namespace bigbatch::torch_backend
