// GpuJpegDecoder where it cannot run: the CPU build, or a CUDA build that
// CMake configured without nvJPEG (cmake/bigbatch_cuda.cmake). The decoder
// refuses to be made, naming what is missing and the fix; the CUDA build
// with nvJPEG compiles cuda/gpu_jpeg_decoder.cpp instead.
#include "bigbatch/common/error.h"
#include "bigbatch/data/gpu_jpeg_decoder.h"

namespace bigbatch {

GpuDecodeSupport gpuJpegDecodeSupport() {
  GpuDecodeSupport s;
#ifdef BIGBATCH_WITH_CUDA
  s.missing =
      "nvJPEG: this CUDA build was configured without it (CMake found no nvjpeg.h and "
      "libnvjpeg in the CUDA toolkit, beside the PyTorch wheel or under NVJPEG_ROOT)";
  s.fix =
      "fetch NVIDIA's nvidia-nvjpeg wheel (scripts/fetch-gpu-deps), unpack it and rebuild with "
      "NVJPEG_ROOT set to its nvidia/cu13 folder (scripts/check-cuda-variant and "
      "scripts/device-check do both; docs/GPU.md), or set data.decode = \"cpu\"";
#else
  s.missing = "CUDA: this bigbatch is the CPU build (Debian's libtorch has no CUDA)";
  s.fix =
      "build the CUDA variant with nvJPEG (scripts/fetch-gpu-deps, then scripts/build-cuda with "
      "NVJPEG_ROOT; docs/GPU.md) and run build-cuda/apps/bigbatch on a GPU machine, or set "
      "data.decode = \"cpu\"";
#endif
  return s;
}

struct GpuJpegDecoder::Impl {};

GpuJpegDecoder::GpuJpegDecoder(const torch::Device&) {
  const GpuDecodeSupport s = gpuJpegDecodeSupport();
  BIGBATCH_THROW(InvalidArgument, "JPEG decoding on the GPU needs {}; {}", s.missing, s.fix);
}

GpuJpegDecoder::~GpuJpegDecoder() = default;

const std::string& GpuJpegDecoder::backend() const {
  static const std::string none = "none";
  return none;
}

const torch::Device& GpuJpegDecoder::device() const {
  static const torch::Device cpu(torch::kCPU);
  return cpu;
}

GpuDecodedBatch GpuJpegDecoder::decode(JpegBatch&&, const ImageAugment&, torch::ScalarType, bool,
                                       const c10::Stream&) {
  BIGBATCH_THROW(Error, "GpuJpegDecoder::decode in a build without GPU decoding");
}

GpuDecodeCounts GpuJpegDecoder::counts() const { return {}; }

}  // namespace bigbatch
