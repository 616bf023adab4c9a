// NvjpegBatchDecoder: nvJPEG behind plan() and decode() — hardware engines,
// CUDA cores or the host for each image, regions where allowed — with a
// plain C++ interface (no torch header). Threading: one thread at a time,
// with the decoder's device current.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bigbatch::data_detail {

enum class NvjpegRoute { kHardware, kCuda, kHost };

// One image: its bytes (host memory, kept until the slot's work is done)
// and the region of it the caller needs, in its pixels.
struct NvjpegInput {
  const uint8_t* data = nullptr;
  size_t size = 0;
  int width = 0, height = 0;  // of the image
  int regionX = 0, regionY = 0, regionWidth = 0, regionHeight = 0;
};

// The allocators nvJPEG takes for its device and pinned buffers, in
// nvJPEG's stream-ordered V2 form (each returns 0 on success); a missing
// pair leaves nvJPEG to cudaMalloc / cudaHostAlloc and their frees — which
// wait for the whole device, each time a buffer grows mid-epoch. `ctx` is
// passed to each and outlives the decoder.
struct NvjpegAllocators {
  using Call = int (*)(void* ctx, void** ptr, size_t size, cudaStream_t stream);
  using Free = int (*)(void* ctx, void* ptr, size_t size, cudaStream_t stream);
  Call deviceMalloc = nullptr;
  Free deviceFree = nullptr;
  Call pinnedMalloc = nullptr;
  Free pinnedFree = nullptr;
  void* ctx = nullptr;
};

// How one image will be decoded, and the size of what is written: its
// region, or the whole image.
struct NvjpegPlan {
  NvjpegRoute route = NvjpegRoute::kHost;
  bool region = false;  // only the region is decoded
  int width = 0, height = 0;
  std::string why;  // kHost: why nvJPEG does not decode it
};

// NvjpegBatchDecoder: nvJPEG behind two calls, plan() and decode(), for the
// GPU decode path (gpu_jpeg_decoder.h). The split follows NVIDIA's batched
// decoder sample and DALI's nvJPEG decoder:
//
//   hardware  the GPU's JPEG engines (A100/H100/H200), one batched call
//             (nvjpegDecodeBatchedEx) for every image they take — baseline
//             JPEGs of 4:4:4, 4:2:2, 4:2:0, 4:4:0 or grey — each as its
//             crop's region when nvjpegDecodeBatchedSupportedEx accepts the
//             region, else whole;
//   cuda      the rest nvJPEG decodes (progressive files; every image on a
//             GPU without engines), one at a time through the decoupled API
//             with a region: GPU_HYBRID (Huffman on the GPU) for baseline
//             images over 1000x1000 pixels, HYBRID (Huffman on the host)
//             otherwise, as DALI chooses;
//   host      what nvJPEG does not decode (four-component CMYK/YCCK, a header
//             it rejects): left to the caller, who decodes with libjpeg-turbo
//             as the CPU path does.
//
// The backend is chosen in the constructor: the hardware one where the GPU
// has engines (nvjpegCreateExV2 returns ARCH_MISMATCH where it has none),
// else the default (CUDA) one. Output is RGB interleaved (NVJPEG_OUTPUT_RGBI,
// 3 bytes a pixel), EXIF orientation ignored (as libjpeg-turbo ignores it).
// Strict bitstream checks where the library takes the flag
// (NVJPEG_FLAGS_BITSTREAM_STRICT): a file that breaks the standard fails
// here and goes to the host. A truncated file never reaches it: the caller
// checks each file's markers on the host first (jpegStreamProblem in
// jpeg_batch_reader.cpp), as a device decoder may decode one without an
// error.
//
// Two slots of per-batch state (the batched state, its decode parameters):
// a caller alternates them and waits, before reusing one, for the device
// work queued with it (double buffering). No torch header.
//
// Threading: one thread at a time, with the decoder's device current.
class NvjpegBatchDecoder {
 public:
  static constexpr int kSlots = 2;

  // Creates the nvJPEG handle on the current device, its buffers from
  // `allocators` where given. Throws std::runtime_error with nvJPEG's
  // status when it cannot start.
  explicit NvjpegBatchDecoder(const NvjpegAllocators& allocators = {});
  ~NvjpegBatchDecoder();
  NvjpegBatchDecoder(const NvjpegBatchDecoder&) = delete;
  NvjpegBatchDecoder& operator=(const NvjpegBatchDecoder&) = delete;

  bool hardware() const { return hardware_; }
  const std::string& backend() const { return backend_; }

  // Host only (headers): how each image will be decoded with `slot`'s state.
  std::vector<NvjpegPlan> plan(const std::vector<NvjpegInput>& in, int slot);

  // Queues on `stream` the decode of every image planned kHardware or kCuda
  // into out[i] (device memory, plan[i].height rows of pitch[i] bytes).
  // Returns one string per image: "" when queued, else why nvJPEG failed
  // (the caller decodes it on the host). A batched call that failed on an
  // image's bytes is retried on each half of its images, down to single
  // images, which go to the CUDA cores (halving_retry.h): one bad file
  // costs about 2 log2(n) batched calls, not the whole batch on the
  // per-image path; one that failed otherwise sends every image there. The
  // decoupled path waits on `stream` between images (its pinned buffers
  // are reused), and a retried batched call waits for it first; nothing
  // else waits. Throws std::runtime_error on a CUDA error.
  std::vector<std::string> decode(const std::vector<NvjpegInput>& in,
                                  const std::vector<NvjpegPlan>& plan,
                                  const std::vector<uint8_t*>& out,
                                  const std::vector<size_t>& pitch, int slot, cudaStream_t stream);

  struct Handles;  // internal

 private:
  void decodeBatched(const std::vector<NvjpegInput>& in, const std::vector<NvjpegPlan>& plan,
                     const std::vector<uint8_t*>& out, const std::vector<size_t>& pitch,
                     const std::vector<size_t>& which, int slot, cudaStream_t stream,
                     std::vector<std::string>& result);
  std::string decodeOnCuda(const NvjpegInput& in, const NvjpegPlan& plan, uint8_t* out,
                           size_t pitch, cudaStream_t stream);

  std::unique_ptr<Handles> h_;
  bool hardware_ = false;
  std::string backend_;
  int pinnedNext_ = 0;  // the decoupled path's pinned buffer for the next image
};

// nvJPEG's name for a status code ("BAD_JPEG", ...).
const char* nvjpegStatusName(int status);

}  // namespace bigbatch::data_detail
