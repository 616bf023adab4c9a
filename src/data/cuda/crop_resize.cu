// The GPU decode path's crop-resize-flip-normalise kernel (crop_resize_cuda.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "crop_resize_cuda.h"

namespace bigbatch::data_detail {
namespace {

constexpr int kThreads = 256;

// ATen's upsample_bilinear2d source position for output `o` of `out` from
// `in` (align_corners = false; half-pixel centres, clamped at 0), as
// bilinearTaps() in image_augment.cpp computes it: the lower tap, the upper
// tap and the upper tap's weight.
struct Tap {
  int32_t i0, i1;
  float w1;
};

__device__ Tap tapOf(int32_t o, int32_t in, int32_t out) {
  const float scale = __fdiv_rn(static_cast<float>(in), static_cast<float>(out));
  float src = __fsub_rn(__fmul_rn(scale, __fadd_rn(static_cast<float>(o), 0.5f)), 0.5f);
  if (src < 0.f) src = 0.f;
  int32_t i0 = static_cast<int32_t>(src);
  if (i0 > in - 1) i0 = in - 1;
  const int32_t i1 = i0 + (i0 < in - 1 ? 1 : 0);
  return {i0, i1, __fsub_rn(src, static_cast<float>(i0))};
}

template <class T>
__device__ T store(float v);
template <>
__device__ float store<float>(float v) {
  return v;
}
template <>
__device__ __nv_bfloat16 store<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __half store<__half>(float v) {
  return __float2half_rn(v);
}

// One thread per output pixel: blockIdx.y is the image, the x dimension
// runs over its height x width pixels. The CPU's order per channel: each
// source row resampled horizontally (a * p0 + b * p1), then the two rows
// vertically, then times scale plus shift; a flip takes the horizontal taps
// in reverse.
template <class T>
__global__ void __launch_bounds__(kThreads)
    cropResizeKernel(const CropResizeItem* items, CropResizeOutput out) {
  const CropResizeItem item = items[blockIdx.y];
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= static_cast<int64_t>(out.height) * out.width) return;
  const int32_t oy = static_cast<int32_t>(p / out.width), ox = static_cast<int32_t>(p % out.width);
  const Tap ty = tapOf(oy, item.height, out.height);
  const Tap tx = tapOf(item.flip ? out.width - 1 - ox : ox, item.width, out.width);
  const uint8_t* r0 = item.pixels + static_cast<int64_t>(item.top + ty.i0) * item.pitch +
                      static_cast<int64_t>(item.left) * 3;
  const uint8_t* r1 = item.pixels + static_cast<int64_t>(item.top + ty.i1) * item.pitch +
                      static_cast<int64_t>(item.left) * 3;
  const float bx = tx.w1, ax = __fsub_rn(1.f, bx);
  const float by = ty.w1, ay = __fsub_rn(1.f, by);
  T* dst = static_cast<T*>(out.data) + item.row * out.strideN + oy * out.strideH + ox * out.strideW;
#pragma unroll
  for (int c = 0; c < 3; ++c) {
    const float x0 = __fadd_rn(__fmul_rn(ax, static_cast<float>(r0[tx.i0 * 3 + c])),
                               __fmul_rn(bx, static_cast<float>(r0[tx.i1 * 3 + c])));
    const float x1 = __fadd_rn(__fmul_rn(ax, static_cast<float>(r1[tx.i0 * 3 + c])),
                               __fmul_rn(bx, static_cast<float>(r1[tx.i1 * 3 + c])));
    const float v = __fadd_rn(
        __fmul_rn(__fadd_rn(__fmul_rn(ay, x0), __fmul_rn(by, x1)), out.scale[c]), out.shift[c]);
    dst[c * out.strideC] = store<T>(v);
  }
}

}  // namespace

const char* launchCropResize(const CropResizeItem* items, int32_t count,
                             const CropResizeOutput& out, void* stream) {
  if (count <= 0) return nullptr;
  const int64_t pixels = static_cast<int64_t>(out.height) * out.width;
  const dim3 grid(static_cast<unsigned>((pixels + kThreads - 1) / kThreads),
                  static_cast<unsigned>(count));
  auto* s = static_cast<cudaStream_t>(stream);
  switch (out.dtype) {
    case CropResizeDtype::kFloat32:
      cropResizeKernel<float><<<grid, kThreads, 0, s>>>(items, out);
      break;
    case CropResizeDtype::kBFloat16:
      cropResizeKernel<__nv_bfloat16><<<grid, kThreads, 0, s>>>(items, out);
      break;
    case CropResizeDtype::kFloat16:
      cropResizeKernel<__half><<<grid, kThreads, 0, s>>>(items, out);
      break;
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? nullptr : cudaGetErrorString(e);
}

}  // namespace bigbatch::data_detail
