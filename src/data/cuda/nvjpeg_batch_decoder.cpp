#include "nvjpeg_batch_decoder.h"

#include <nvjpeg.h>

#include <stdexcept>

#include "../halving_retry.h"

namespace bigbatch::data_detail {

const char* nvjpegStatusName(int status) {
  switch (static_cast<nvjpegStatus_t>(status)) {
    case NVJPEG_STATUS_SUCCESS:
      return "SUCCESS";
    case NVJPEG_STATUS_NOT_INITIALIZED:
      return "NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER:
      return "INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG:
      return "BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
      return "JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE:
      return "ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED:
      return "EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH:
      return "ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR:
      return "INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED:
      return "IMPLEMENTATION_NOT_SUPPORTED";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM:
      return "INCOMPLETE_BITSTREAM";
  }
  return "UNKNOWN_STATUS";
}

namespace {

// nvJPEG picks GPU_HYBRID (Huffman on the GPU) over HYBRID above this many
// pixels (DALI's threshold: below it the host's Huffman decode is faster
// than the GPU's per-image overhead).
constexpr long long kGpuHuffmanPixels = 1000LL * 1000LL;

void check(nvjpegStatus_t s, const char* what) {
  if (s != NVJPEG_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("nvJPEG: ") + what + " returned " + nvjpegStatusName(s));
  }
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string("nvJPEG decode: ") + what + ": " + cudaGetErrorString(e));
  }
}

std::string failed(const char* call, nvjpegStatus_t s) {
  return std::string(call) + " returned " + nvjpegStatusName(s);
}

}  // namespace

// Every nvJPEG object the decoder owns; destroyed in reverse.
struct NvjpegBatchDecoder::Handles {
  nvjpegHandle_t handle = nullptr;
  nvjpegJpegStream_t header = nullptr;  // plan()'s header parses
  struct Slot {
    nvjpegJpegState_t state = nullptr;         // the batched (hardware) state
    std::vector<nvjpegDecodeParams_t> params;  // one per image of the batch
    bool preallocated = false;
  };
  Slot slots[kSlots];
  // The decoupled path: GPU_HYBRID [0] and HYBRID [1] decoders (either may
  // be missing), two pinned buffers and parsed streams used alternately, one
  // device buffer, one parameter set.
  nvjpegJpegDecoder_t decoder[2] = {};
  nvjpegJpegState_t decoderState[2] = {};
  nvjpegBufferPinned_t pinned[2] = {};
  nvjpegJpegStream_t stream[2] = {};
  nvjpegBufferDevice_t device = nullptr;
  nvjpegDecodeParams_t params = nullptr;
  // The caller's allocators (null: nvJPEG's own cudaMalloc/cudaHostAlloc).
  nvjpegDevAllocatorV2_t devAllocator{};
  nvjpegPinnedAllocatorV2_t pinnedAllocator{};
  nvjpegDevAllocatorV2_t* dev() { return devAllocator.dev_malloc ? &devAllocator : nullptr; }
  nvjpegPinnedAllocatorV2_t* pinnedAlloc() {
    return pinnedAllocator.pinned_malloc ? &pinnedAllocator : nullptr;
  }

  ~Handles() {
    if (params) nvjpegDecodeParamsDestroy(params);
    if (device) nvjpegBufferDeviceDestroy(device);
    for (int i = 1; i >= 0; --i) {
      if (stream[i]) nvjpegJpegStreamDestroy(stream[i]);
      if (pinned[i]) nvjpegBufferPinnedDestroy(pinned[i]);
      if (decoderState[i]) nvjpegJpegStateDestroy(decoderState[i]);
      if (decoder[i]) nvjpegDecoderDestroy(decoder[i]);
    }
    for (int s = kSlots - 1; s >= 0; --s) {
      for (nvjpegDecodeParams_t p : slots[s].params) nvjpegDecodeParamsDestroy(p);
      if (slots[s].state) nvjpegJpegStateDestroy(slots[s].state);
    }
    if (header) nvjpegJpegStreamDestroy(header);
    if (handle) nvjpegDestroy(handle);
  }

  // Decode parameters for RGB interleaved output, EXIF orientation ignored.
  nvjpegDecodeParams_t makeParams() {
    nvjpegDecodeParams_t p = nullptr;
    check(nvjpegDecodeParamsCreate(handle, &p), "nvjpegDecodeParamsCreate");
    nvjpegDecodeParamsSetOutputFormat(p, NVJPEG_OUTPUT_RGBI);
    nvjpegDecodeParamsSetExifOrientation(p, NVJPEG_ORIENTATION_NORMAL);
    return p;
  }
};

NvjpegBatchDecoder::NvjpegBatchDecoder(const NvjpegAllocators& a)
    : h_(std::make_unique<Handles>()) {
  Handles& h = *h_;
  if (a.deviceMalloc && a.deviceFree) h.devAllocator = {a.deviceMalloc, a.deviceFree, a.ctx};
  if (a.pinnedMalloc && a.pinnedFree) h.pinnedAllocator = {a.pinnedMalloc, a.pinnedFree, a.ctx};
  // The hardware backend if the GPU has JPEG engines, else the default
  // (CUDA) one; each first with strict bitstream checks (a file that breaks
  // the JPEG standard is an error, not decoded as best it can: it then goes
  // to libjpeg-turbo on the host, which stops on its warning as the CPU
  // path does) and chroma interpolated when upsampled — as libjpeg-turbo's
  // default ("fancy") upsampling does — then with fewer, where the library
  // refuses a flag.
  constexpr unsigned kStrict = NVJPEG_FLAGS_BITSTREAM_STRICT;
  constexpr unsigned kInterpolate = NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION;
  const unsigned flagChoices[] = {kStrict | kInterpolate, kStrict, kInterpolate,
                                  NVJPEG_FLAGS_DEFAULT};
  nvjpegStatus_t noHardware = NVJPEG_STATUS_SUCCESS;
  bool interpolated = false, strict = false;
  for (const nvjpegBackend_t backend : {NVJPEG_BACKEND_HARDWARE, NVJPEG_BACKEND_DEFAULT}) {
    for (const unsigned flags : flagChoices) {
      const nvjpegStatus_t s =
          nvjpegCreateExV2(backend, h.dev(), h.pinnedAlloc(), flags, &h.handle);
      if (s == NVJPEG_STATUS_SUCCESS) {
        hardware_ = backend == NVJPEG_BACKEND_HARDWARE;
        interpolated = (flags & kInterpolate) != 0;
        strict = (flags & kStrict) != 0;
        break;
      }
      h.handle = nullptr;
      if (backend == NVJPEG_BACKEND_HARDWARE) noHardware = s;
      if (backend == NVJPEG_BACKEND_DEFAULT && flags == NVJPEG_FLAGS_DEFAULT) {
        check(s, "nvjpegCreateExV2 (default backend)");
      }
    }
    if (h.handle) break;
  }
  check(nvjpegJpegStreamCreate(h.handle, &h.header), "nvjpegJpegStreamCreate");
  for (auto& slot : h.slots)
    check(nvjpegJpegStateCreate(h.handle, &slot.state), "nvjpegJpegStateCreate");
  const nvjpegBackend_t cudaBackends[2] = {NVJPEG_BACKEND_GPU_HYBRID, NVJPEG_BACKEND_HYBRID};
  for (int k = 0; k < 2; ++k) {
    if (nvjpegDecoderCreate(h.handle, cudaBackends[k], &h.decoder[k]) != NVJPEG_STATUS_SUCCESS) {
      h.decoder[k] = nullptr;
      continue;
    }
    check(nvjpegDecoderStateCreate(h.handle, h.decoder[k], &h.decoderState[k]),
          "nvjpegDecoderStateCreate");
  }
  for (int i = 0; i < 2; ++i) {
    check(nvjpegBufferPinnedCreateV2(h.handle, h.pinnedAlloc(), &h.pinned[i]),
          "nvjpegBufferPinnedCreateV2");
    check(nvjpegJpegStreamCreate(h.handle, &h.stream[i]), "nvjpegJpegStreamCreate");
  }
  check(nvjpegBufferDeviceCreateV2(h.handle, h.dev(), &h.device), "nvjpegBufferDeviceCreateV2");
  h.params = h.makeParams();

  int major = 0, minor = 0, patch = 0;
  nvjpegGetProperty(MAJOR_VERSION, &major);
  nvjpegGetProperty(MINOR_VERSION, &minor);
  nvjpegGetProperty(PATCH_LEVEL, &patch);
  backend_ = "nvJPEG " + std::to_string(major) + "." + std::to_string(minor) + "." +
             std::to_string(patch) + ": ";
  const std::string cuda = h.decoder[0] && h.decoder[1] ? "CUDA cores (GPU_HYBRID/HYBRID)"
                           : h.decoder[0]               ? "CUDA cores (GPU_HYBRID)"
                           : h.decoder[1]               ? "CUDA cores (HYBRID)"
                                                        : "no CUDA decoder";
  if (hardware_) {
    unsigned engines = 0, cores = 0;
    const bool known =
        nvjpegGetHardwareDecoderInfo(h.handle, &engines, &cores) == NVJPEG_STATUS_SUCCESS;
    backend_ +=
        "hardware JPEG decoder" +
        (known ? " (" + std::to_string(engines) + " engines x " + std::to_string(cores) + " cores)"
               : std::string()) +
        " for baseline JPEGs, " + cuda + " for progressive ones";
  } else {
    backend_ += cuda + " (no hardware JPEG decoder: " + nvjpegStatusName(noHardware) + ")";
  }
  backend_ += std::string(", region decode, chroma ") +
              (interpolated ? "interpolated" : "replicated") +
              (strict ? ", strict bitstream checks" : ", no strict bitstream checks") +
              ", buffers from " +
              (h.dev() ? "the caching allocators" : "cudaMalloc/cudaHostAlloc") +
              "; libjpeg-turbo on the host for CMYK/YCCK";
}

NvjpegBatchDecoder::~NvjpegBatchDecoder() = default;

std::vector<NvjpegPlan> NvjpegBatchDecoder::plan(const std::vector<NvjpegInput>& in, int slot) {
  Handles& h = *h_;
  Handles::Slot& s = h.slots[slot];
  while (s.params.size() < in.size()) s.params.push_back(h.makeParams());
  std::vector<NvjpegPlan> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const NvjpegInput& x = in[i];
    NvjpegPlan& p = out[i];
    int components = 0;
    nvjpegChromaSubsampling_t css = NVJPEG_CSS_UNKNOWN;
    int widths[NVJPEG_MAX_COMPONENT] = {}, heights[NVJPEG_MAX_COMPONENT] = {};
    const nvjpegStatus_t info =
        nvjpegGetImageInfo(h.handle, x.data, x.size, &components, &css, widths, heights);
    if (info != NVJPEG_STATUS_SUCCESS) {
      p.why = "nvJPEG cannot read its header (" + std::string(nvjpegStatusName(info)) + ")";
      continue;
    }
    if (components != 1 && components != 3) {
      p.why = std::to_string(components) + " colour components (CMYK or YCCK)";
      continue;
    }
    if (css == NVJPEG_CSS_UNKNOWN) {
      p.why = "a chroma subsampling nvJPEG does not decode";
      continue;
    }
    if (widths[0] != x.width || heights[0] != x.height) {
      p.why = "nvJPEG reads it as " + std::to_string(widths[0]) + "x" + std::to_string(heights[0]) +
              ", libjpeg-turbo as " + std::to_string(x.width) + "x" + std::to_string(x.height);
      continue;
    }
    const bool whole =
        x.regionX == 0 && x.regionY == 0 && x.regionWidth == x.width && x.regionHeight == x.height;
    nvjpegDecodeParams_t params = s.params[i];
    if (whole) {
      nvjpegDecodeParamsSetROI(params, 0, 0, -1, -1);
    } else {
      nvjpegDecodeParamsSetROI(params, x.regionX, x.regionY, x.regionWidth, x.regionHeight);
    }
    p.route = NvjpegRoute::kCuda;
    p.region = !whole;
    if (hardware_ &&
        nvjpegJpegStreamParseHeader(h.handle, x.data, x.size, h.header) == NVJPEG_STATUS_SUCCESS) {
      int supported = -1;  // 0 means supported
      if (nvjpegDecodeBatchedSupportedEx(h.handle, h.header, params, &supported) ==
              NVJPEG_STATUS_SUCCESS &&
          supported == 0) {
        p.route = NvjpegRoute::kHardware;
      } else if (!whole) {
        // The engines may take the whole image where they refuse the region.
        nvjpegDecodeParamsSetROI(params, 0, 0, -1, -1);
        supported = -1;
        if (nvjpegDecodeBatchedSupportedEx(h.handle, h.header, params, &supported) ==
                NVJPEG_STATUS_SUCCESS &&
            supported == 0) {
          p.route = NvjpegRoute::kHardware;
          p.region = false;
        }
      }
    }
    if (p.route == NvjpegRoute::kCuda && !h.decoder[0] && !h.decoder[1]) {
      p.route = NvjpegRoute::kHost;
      p.why = "no nvJPEG decoder on the CUDA cores could be made";
      continue;
    }
    p.width = p.region ? x.regionWidth : x.width;
    p.height = p.region ? x.regionHeight : x.height;
  }
  return out;
}

std::string NvjpegBatchDecoder::decodeOnCuda(const NvjpegInput& in, const NvjpegPlan& plan,
                                             uint8_t* out, size_t pitch, cudaStream_t stream) {
  Handles& h = *h_;
  if (!h.decoder[0] && !h.decoder[1]) return "no nvJPEG decoder on the CUDA cores";
  // The pinned buffer and parsed stream of this image: the other pair may
  // still be under the previous image's transfer.
  const int b = pinnedNext_;
  nvjpegJpegStream_t parsed = h.stream[b];
  nvjpegStatus_t s = nvjpegJpegStreamParse(h.handle, in.data, in.size, 0, 0, parsed);
  if (s != NVJPEG_STATUS_SUCCESS) return failed("nvjpegJpegStreamParse", s);
  nvjpegJpegEncoding_t encoding = NVJPEG_ENCODING_UNKNOWN;
  nvjpegJpegStreamGetJpegEncoding(parsed, &encoding);
  const bool large = static_cast<long long>(in.width) * in.height > kGpuHuffmanPixels;
  int k = encoding != NVJPEG_ENCODING_PROGRESSIVE_DCT_HUFFMAN && large ? 0 : 1;
  if (!h.decoder[k]) k = 1 - k;
  if (plan.region) {
    nvjpegDecodeParamsSetROI(h.params, in.regionX, in.regionY, in.regionWidth, in.regionHeight);
  } else {
    nvjpegDecodeParamsSetROI(h.params, 0, 0, -1, -1);
  }
  nvjpegStateAttachPinnedBuffer(h.decoderState[k], h.pinned[b]);
  nvjpegStateAttachDeviceBuffer(h.decoderState[k], h.device);
  s = nvjpegDecodeJpegHost(h.handle, h.decoder[k], h.decoderState[k], h.params, parsed);
  if (s != NVJPEG_STATUS_SUCCESS) return failed("nvjpegDecodeJpegHost", s);
  // The previous image's transfer and device decode, which share the
  // device buffer, are done before this one's transfer starts (NVIDIA's
  // decoupled sample waits here too).
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  s = nvjpegDecodeJpegTransferToDevice(h.handle, h.decoder[k], h.decoderState[k], parsed, stream);
  if (s != NVJPEG_STATUS_SUCCESS) return failed("nvjpegDecodeJpegTransferToDevice", s);
  pinnedNext_ = 1 - b;
  nvjpegImage_t dst{};
  dst.channel[0] = out;
  dst.pitch[0] = pitch;
  s = nvjpegDecodeJpegDevice(h.handle, h.decoder[k], h.decoderState[k], &dst, stream);
  if (s != NVJPEG_STATUS_SUCCESS) return failed("nvjpegDecodeJpegDevice", s);
  return "";
}

// Whether a failed batched call failed on an image's bytes, which a
// smaller batch without that image would not (the statuses nvJPEG gives a
// bitstream it cannot or will not decode), rather than on the call itself
// (memory, execution), which every retry would meet again.
bool failedOnAnImage(nvjpegStatus_t s) {
  return s == NVJPEG_STATUS_BAD_JPEG || s == NVJPEG_STATUS_JPEG_NOT_SUPPORTED ||
         s == NVJPEG_STATUS_INCOMPLETE_BITSTREAM;
}

// One batched call over `which` (images planned kHardware). Where it fails
// on an image's bytes, each half again, down to single images, which go
// to the CUDA cores (halving_retry.h); where it fails otherwise, every
// image to the CUDA cores at once. Before each call after the first the
// host waits for `stream`: the slot's state may still be under the work
// an earlier call of this batch queued (failure paths only).
void NvjpegBatchDecoder::decodeBatched(const std::vector<NvjpegInput>& in,
                                       const std::vector<NvjpegPlan>& plan,
                                       const std::vector<uint8_t*>& out,
                                       const std::vector<size_t>& pitch,
                                       const std::vector<size_t>& which, int slot,
                                       cudaStream_t stream, std::vector<std::string>& result) {
  Handles& h = *h_;
  Handles::Slot& s = h.slots[slot];
  int calls = 0;
  nvjpegStatus_t last = NVJPEG_STATUS_SUCCESS;
  const auto batch = [&](const std::vector<size_t>& some) -> std::string {
    if (calls++ > 0) check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::vector<const unsigned char*> data;
    std::vector<size_t> lengths;
    std::vector<nvjpegImage_t> dst;
    std::vector<nvjpegDecodeParams_t> params;
    for (size_t i : some) {
      data.push_back(in[i].data);
      lengths.push_back(in[i].size);
      nvjpegImage_t image{};
      image.channel[0] = out[i];
      image.pitch[0] = pitch[i];
      dst.push_back(image);
      params.push_back(s.params[i]);
    }
    const int n = static_cast<int>(some.size());
    if (!s.preallocated) {
      // The engines' buffers for a batch of this size once, up front (DALI
      // and nvImageCodec measured >20% on 8 GPUs); a hint, refused harmlessly.
      nvjpegDecodeBatchedPreAllocate(h.handle, s.state, n, 1024, 1024, NVJPEG_CSS_444,
                                     NVJPEG_OUTPUT_RGBI);
      s.preallocated = true;
    }
    last = nvjpegDecodeBatchedInitialize(h.handle, s.state, n, 1, NVJPEG_OUTPUT_RGBI);
    if (last == NVJPEG_STATUS_SUCCESS) {
      last = nvjpegDecodeBatchedEx(h.handle, s.state, data.data(), lengths.data(), dst.data(),
                                   params.data(), stream);
    }
    return last == NVJPEG_STATUS_SUCCESS ? std::string() : failed("nvjpegDecodeBatchedEx", last);
  };
  const auto single = [&](size_t k, const std::string& batchWhy) {
    const std::string why = decodeOnCuda(in[k], plan[k], out[k], pitch[k], stream);
    if (!why.empty()) result[k] = batchWhy + ", then " + why;
  };
  const std::string why = batch(which);
  if (why.empty()) return;
  if (!failedOnAnImage(last) || which.size() == 1) {
    for (size_t k : which) single(k, why);
    return;
  }
  const auto middle = which.begin() + static_cast<std::ptrdiff_t>(which.size() / 2);
  retryInHalves(std::vector<size_t>(which.begin(), middle), batch, single);
  retryInHalves(std::vector<size_t>(middle, which.end()), batch, single);
}

std::vector<std::string> NvjpegBatchDecoder::decode(const std::vector<NvjpegInput>& in,
                                                    const std::vector<NvjpegPlan>& plan,
                                                    const std::vector<uint8_t*>& out,
                                                    const std::vector<size_t>& pitch, int slot,
                                                    cudaStream_t stream) {
  std::vector<std::string> result(in.size());
  std::vector<size_t> which;
  for (size_t i = 0; i < in.size(); ++i) {
    if (plan[i].route == NvjpegRoute::kHost) result[i] = plan[i].why;
    if (plan[i].route == NvjpegRoute::kHardware) which.push_back(i);
  }
  if (!which.empty()) decodeBatched(in, plan, out, pitch, which, slot, stream, result);
  for (size_t i = 0; i < in.size(); ++i) {
    if (plan[i].route == NvjpegRoute::kCuda) {
      result[i] = decodeOnCuda(in[i], plan[i], out[i], pitch[i], stream);
    }
  }
  return result;
}

}  // namespace bigbatch::data_detail
