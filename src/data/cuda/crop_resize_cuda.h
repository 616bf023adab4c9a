// launchCropResize: the GPU decode path's one kernel — decoded RGB images
// cropped, resized, flipped and normalised into a batch of any dtype and
// strides, one launch per batch. Plain C++ interface (no CUDA or torch
// header); the work runs on the stream given, from any thread.
#pragma once

#include <cstdint>

namespace bigbatch::data_detail {

// The GPU decode path's one kernel (crop_resize.cu): from decoded 8-bit RGB
// images in device memory (interleaved, one pitch each) to the model's
// input — each image's crop resized to the output size (bilinear, ATen's
// sampling positions with align_corners = false), mirrored when its flip is
// set, normalised (x * scale[c] + shift[c]) and stored as float, bfloat16
// or half at any strides (NHWC or NCHW) — one launch for the batch, through
// a table of images (as Apex's multi_tensor_apply launches over many tensors).
//
// Every float operation is the CPU augmenter's (image_augment.cpp), in its
// order and rounded the same way (no fused multiply-add), so for the same
// decoded pixels the two agree exactly in float.

// One image of the batch: where its pixels are and which of them to take.
struct CropResizeItem {
  const uint8_t* pixels = nullptr;  // device; 3 bytes a pixel (RGB), rows `pitch` bytes apart
  int64_t pitch = 0;
  int32_t top = 0, left = 0, height = 0, width = 0;  // the crop, in those pixels
  int32_t flip = 0;                                  // 1: mirror left-right
  int32_t row = 0;                                   // its row of the output batch
};

enum class CropResizeDtype : int32_t { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// The output batch [n, 3, height, width] at element strides.
struct CropResizeOutput {
  void* data = nullptr;  // device
  CropResizeDtype dtype = CropResizeDtype::kFloat32;
  int64_t strideN = 0, strideC = 0, strideH = 0, strideW = 0;
  int32_t height = 0, width = 0;
  float scale[3] = {1.f, 1.f, 1.f}, shift[3] = {0.f, 0.f, 0.f};
};

// Queues the kernel over `count` images whose table `items` is in device
// memory, on `stream` (a cudaStream_t). Returns the launch's CUDA error
// string, or nullptr.
const char* launchCropResize(const CropResizeItem* items, int32_t count,
                             const CropResizeOutput& out, void* stream);

}  // namespace bigbatch::data_detail
