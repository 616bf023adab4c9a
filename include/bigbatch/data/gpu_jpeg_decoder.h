// GpuJpegDecoder: the device half of the GPU decode path (data.decode =
// "gpu") — a batch of JPEG files decoded by nvJPEG, cropped, resized,
// flipped and normalised into the model's input on the GPU. Threading: one
// thread at a time (the training thread).
#pragma once

#include <c10/core/Stream.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/data/image_augment.h"
#include "bigbatch/data/jpeg_batch_reader.h"

namespace bigbatch {

// Whether this build decodes JPEGs on the GPU: the CUDA variant linked with
// nvJPEG. `missing` and `fix` say what is not there and how to get it.
// Whether a GPU is visible is run.device's check (a CUDA run refuses to
// start without one).
struct GpuDecodeSupport {
  bool built = false;
  std::string missing, fix;
};
GpuDecodeSupport gpuJpegDecodeSupport();

// What decode() produced: `images` holds the rows of the batch's samples
// listed in `kept`, in order; `failed` the rows no decoder could decode,
// with why (the caller skips them: JpegBatchReader::skipBad).
struct GpuDecodedBatch {
  torch::Tensor images;  // [kept.size(), 3, H, W] on the device
  std::vector<size_t> kept;
  std::vector<std::pair<size_t, std::string>> failed;
};

// Images each route decoded since the decoder was made.
struct GpuDecodeCounts {
  int64_t hardware = 0;  // NVJPG engines
  int64_t cuda = 0;      // nvJPEG on the CUDA cores (GPU_HYBRID / HYBRID)
  int64_t host = 0;      // libjpeg-turbo on the host, then copied
  int64_t region = 0;    // of these, decoded as their crop's region only
};

// GpuJpegDecoder: the device half of the GPU decode path (data.decode =
// "gpu"). A batch of JPEG files (jpeg_batch_reader.h: the bytes, each
// sample's crop and flip) becomes the model's input on the GPU: nvJPEG
// decodes — on the GPU's hardware JPEG engines (A100/H100/H200) where the
// image allows, else on the CUDA cores (nvJPEG's GPU_HYBRID/HYBRID), else,
// for what nvJPEG cannot decode (CMYK, YCCK), libjpeg-turbo on the host as
// the CPU path does — each image only its crop's region where the route can
// (region-of-interest decode), and one kernel crops, resizes (bilinear,
// ATen's sampling positions), flips and normalises every image of the batch
// into a [n, 3, H, W] tensor of the compute dtype, channels-last or not.
//
// The backend is chosen once, when the decoder is made, and backend() says
// which (the run's banner prints it). For the images the hardware engines
// decode, nothing is waited for on the host but the decode two batches
// back: work is queued on the caller's stream, and the decoder's nvJPEG
// states are used alternately (double-buffered). Images on the CUDA-core
// route (progressive JPEGs; every image where there are no engines) are
// not: nvJPEG's decoupled API decodes their Huffman data on this thread,
// and each image's transfer waits for the previous image's device decode
// (they share one device buffer), so such a batch costs the training
// thread its decode time. Known limit: moving that route to a thread of
// its own, as DALI does, is not done.
//
// In a build without CUDA or without nvJPEG the class exists, and its
// constructor throws InvalidArgument saying what is missing and the fix;
// gpuJpegDecodeSupport() says it before anything starts.
//
// Threading: one thread at a time (the training thread).
class GpuJpegDecoder {
 public:
  // On `device` (a CUDA device). Throws InvalidArgument where this build or
  // this machine cannot (naming what is missing), IoError when nvJPEG fails
  // to start (with its status).
  explicit GpuJpegDecoder(const torch::Device& device);
  ~GpuJpegDecoder();
  GpuJpegDecoder(const GpuJpegDecoder&) = delete;
  GpuJpegDecoder& operator=(const GpuJpegDecoder&) = delete;

  // For the banner, e.g. "nvJPEG 13.0.1: hardware JPEG decoder (E engines x
  // C cores) for baseline JPEGs, CUDA cores (GPU_HYBRID/HYBRID) for
  // progressive ones, region decode, chroma interpolated; libjpeg-turbo on
  // the host for CMYK/YCCK", or "...: CUDA cores (...) (no hardware JPEG
  // decoder: ARCH_MISMATCH), ...".
  const std::string& backend() const;
  const torch::Device& device() const;

  // Queues the decode of `batch` on `stream` (a stream of device()) and
  // returns without waiting for it. `augment` gives the output size and
  // normalisation (the crops are the samples' plans); `dtype` float, bfloat16
  // or half. The images are allocated on `stream`. The batch's bytes are kept
  // until the device has read them.
  GpuDecodedBatch decode(JpegBatch&& batch, const ImageAugment& augment, torch::ScalarType dtype,
                         bool channelsLast, const c10::Stream& stream);

  GpuDecodeCounts counts() const;

  struct Impl;  // internal

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace bigbatch
