# CUDA: the variant build, and the compile check of every CUDA source.
#
# BIGBATCH_CUDA=ON builds the trainer for CUDA devices (run.device = "cuda"):
# libtorch must be a CUDA build (the C++ API of a PyTorch 2.x wheel;
# scripts/build-cuda finds it), every module is compiled with
# BIGBATCH_WITH_CUDA=1, and the CUDA sources (the fused optimizer kernels)
# link into the trainer.
#
# BIGBATCH_CUDA=OFF (the default: Debian's CPU libtorch 1.13): when nvcc is
# found, the same CUDA sources still compile, into libraries nothing links —
# so work done on machines without a GPU cannot break them unnoticed (CI has
# the toolkit, not the GPU). BIGBATCH_CUDA_CHECK=OFF skips that.
option(BIGBATCH_CUDA_CHECK "Compile the CUDA sources in a CPU build when nvcc is found" ON)
# Device code for these architectures (sm_90: the H100/H200 the project checks on).
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()

# fmt: PyTorch 2.x wheels ship fmt 12 headers in torch/include; they would
# shadow the system fmt that spdlog is built against and that we link (fmt 9
# on Debian 12 and Ubuntu 24.04), and mixing the two does not compile. A
# folder holding only a link to the system fmt goes first on every include
# path. Debian's libtorch 1.13 ships no fmt headers: nothing to do there.
get_target_property(_fmt_inc fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
list(GET _fmt_inc 0 _fmt_inc)
set(_bigbatch_torch_fmt "")
foreach(_dir ${TORCH_INCLUDE_DIRS})
  # Debian's libtorch lists /usr/include itself: that fmt is the system one.
  if(EXISTS "${_dir}/fmt/core.h" AND NOT _dir STREQUAL _fmt_inc)
    set(_bigbatch_torch_fmt "${_dir}")
  endif()
endforeach()
if(_bigbatch_torch_fmt)
  set(_shim "${CMAKE_BINARY_DIR}/fmt_shim")
  file(MAKE_DIRECTORY "${_shim}")
  file(CREATE_LINK "${_fmt_inc}/fmt" "${_shim}/fmt" SYMBOLIC)
  include_directories(BEFORE SYSTEM "${_shim}")
  message(STATUS "bigbatch: ${_bigbatch_torch_fmt}/fmt shadowed by the system fmt (${_fmt_inc}/fmt)")
endif()

set(BIGBATCH_HAVE_NVCC OFF)
if(BIGBATCH_CUDA)
  if(NOT TARGET torch_cuda AND NOT TORCH_CUDA_LIBRARIES)
    message(FATAL_ERROR
      "BIGBATCH_CUDA=ON needs a CUDA build of libtorch, but ${TORCH_LIBRARY} has no CUDA. "
      "Point CMAKE_PREFIX_PATH at a CUDA PyTorch wheel's "
      "$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') "
      "(scripts/build-cuda does), or build without -DBIGBATCH_CUDA=ON")
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(BIGBATCH_HAVE_NVCC ON)
  add_compile_definitions(BIGBATCH_WITH_CUDA=1)
  # PyTorch 2.x wheels export libstdc++ symbols they link statically
  # (std::filesystem among them; pytorch/pytorch#133437). Listed before
  # libtorch, a program's std::filesystem calls would bind to those copies,
  # which crash (remove_all, seen with 2.11). Naming the shared libstdc++
  # first among an executable's libraries makes the dynamic linker find the
  # real ones. By file name (-l:libstdc++.so.6), in one linker argument:
  # built on the GPU machine (its compiler is /opt/gcc's GCC 13.3) with
  # -lstdc++, no executable had libstdc++ in its NEEDED list (readelf,
  # 2026-12-04) and the CUDA-run tests crashed in remove_all — most likely
  # that -lstdc++ finds a static archive, from which a flag ahead of the
  # objects pulls nothing. The file name asks for the shared object: built
  # there (visits 3 and 4), libstdc++.so.6 is the first NEEDED entry and the
  # CUDA-run tests pass.
  add_link_options("LINKER:--push-state,--no-as-needed,-l:libstdc++.so.6,--pop-state")
  # PyTorch's CMake files replace CMAKE_CUDA_ARCHITECTURES by -gencode flags
  # from TORCH_CUDA_ARCH_LIST (scripts/build-cuda sets it).
  message(STATUS "bigbatch: CUDA variant (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
                 "TORCH_CUDA_ARCH_LIST '${TORCH_CUDA_ARCH_LIST}')")
elseif(BIGBATCH_CUDA_CHECK)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    enable_language(CUDA)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(BIGBATCH_HAVE_NVCC ON)
      message(STATUS "bigbatch: CPU build; CUDA sources compiled as a check (nvcc "
                     "${CMAKE_CUDA_COMPILER_VERSION})")
    endif()
  endif()
  if(NOT BIGBATCH_HAVE_NVCC)
    message(STATUS "bigbatch: no CUDA toolkit found; the CUDA sources are not compiled")
  endif()
endif()

# NCCL (the GPU gradient exchange, src/comm/nccl): the toolkit's copy, NCCL_ROOT,
# or the one a PyTorch wheel brings (site-packages/nvidia/nccl, which ships
# only libnccl.so.2). Compiled wherever nvcc is; linked into the CUDA variant.
set(BIGBATCH_HAVE_NCCL OFF)
if(BIGBATCH_HAVE_NVCC)
  set(_nccl_hints $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  if(Torch_DIR)
    list(APPEND _nccl_hints "${Torch_DIR}/../../../../nvidia/nccl")
  endif()
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(BIGBATCH_HAVE_NCCL ON)
    message(STATUS "bigbatch: NCCL ${NCCL_LIBRARY} (${NCCL_INCLUDE_DIR}/nccl.h)")
  else()
    message(STATUS "bigbatch: no NCCL found (set NCCL_ROOT); GPU ranks exchange through the host")
  endif()
endif()

# cuDNN (the fused BatchNorm+ReLU, src/models/cuda/fused_batch_norm.cpp):
# the headers and libcudnn.so.9 of the PyTorch wheel's own nvidia-cudnn
# package (site-packages/nvidia/cudnn, first: the library libtorch_cuda
# loads), CUDNN_ROOT, or the toolkit's. The CUDA variant only (the file
# uses libtorch's cuDNN handle); without it model.fused_bn fuses nothing.
set(BIGBATCH_HAVE_CUDNN OFF)
if(BIGBATCH_CUDA)
  set(_cudnn_hints $ENV{CUDNN_ROOT} ${CUDNN_ROOT})
  if(Torch_DIR)
    list(PREPEND _cudnn_hints "${Torch_DIR}/../../../../nvidia/cudnn")
  endif()
  list(APPEND _cudnn_hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${_cudnn_hints}
               ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
    set(BIGBATCH_HAVE_CUDNN ON)
    message(STATUS "bigbatch: cuDNN ${CUDNN_LIBRARY} (${CUDNN_INCLUDE_DIR}/cudnn.h)")
  else()
    message(STATUS "bigbatch: no cuDNN headers found (set CUDNN_ROOT); model.fused_bn fuses nothing")
  endif()
endif()

# nvJPEG (the GPU decode path, data.decode = "gpu": src/data/cuda): the
# toolkit's copy, NVJPEG_ROOT (an unpacked nvidia-nvjpeg wheel's nvidia/cu13
# folder — scripts/fetch-gpu-deps fetches the wheel, scripts/check-cuda-variant
# and scripts/device-check unpack it and set NVJPEG_ROOT), or the wheel
# installed beside PyTorch (site-packages/nvidia/cu13). The wheel ships only
# libnvjpeg.so.13 (no libnvjpeg.so link). Compiled wherever nvcc is; linked
# into the CUDA variant; without it data.decode = "gpu" is refused, naming
# the fix.
set(BIGBATCH_HAVE_NVJPEG OFF)
if(BIGBATCH_HAVE_NVCC)
  set(_nvjpeg_hints $ENV{NVJPEG_ROOT} ${NVJPEG_ROOT} ${CUDAToolkit_LIBRARY_ROOT}
      ${CUDAToolkit_TARGET_DIR})
  if(Torch_DIR)
    list(APPEND _nvjpeg_hints "${Torch_DIR}/../../../../nvidia/cu13")
  endif()
  find_path(NVJPEG_INCLUDE_DIR nvjpeg.h HINTS ${_nvjpeg_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(NVJPEG_LIBRARY NAMES nvjpeg libnvjpeg.so.13 HINTS ${_nvjpeg_hints}
               ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(NVJPEG_INCLUDE_DIR AND NVJPEG_LIBRARY)
    set(BIGBATCH_HAVE_NVJPEG ON)
    message(STATUS "bigbatch: nvJPEG ${NVJPEG_LIBRARY} (${NVJPEG_INCLUDE_DIR}/nvjpeg.h)")
  else()
    message(STATUS "bigbatch: no nvJPEG found (set NVJPEG_ROOT); data.decode = \"gpu\" is refused")
  endif()
endif()

# bigbatch_cuda_library(NAME SOURCES...): CUDA kernels with a plain C++
# interface (no torch header), compiled with the project's flags.
function(bigbatch_cuda_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${name} PUBLIC CUDA::cudart ${ARG_DEPS})
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -Xcompiler=-Wall>)
endfunction()

# bigbatch_module_kernels(MODULE SOURCES...): a module's CUDA kernels as
# bigbatch_MODULE_cuda — linked into bigbatch_MODULE in the CUDA variant,
# compiled (not linked) in a CPU build wherever nvcc is found, as a check.
function(bigbatch_module_kernels module)
  if(NOT BIGBATCH_HAVE_NVCC)
    return()
  endif()
  bigbatch_cuda_library(bigbatch_${module}_cuda ${ARGN})
  if(BIGBATCH_CUDA)
    target_link_libraries(bigbatch_${module} PUBLIC bigbatch_${module}_cuda)
  endif()
endfunction()
