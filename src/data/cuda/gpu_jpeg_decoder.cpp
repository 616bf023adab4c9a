// GpuJpegDecoder in the CUDA build with nvJPEG (gpu_jpeg_decoder.h): per
// batch, nvJPEG's plan and decode (nvjpeg_batch_decoder.h) into one device
// buffer, libjpeg-turbo on the host for what nvJPEG does not decode, then
// the crop-resize kernel (crop_resize_cuda.h) into the batch — all queued on
// the caller's stream, the host waiting only for the same slot's batch two
// decodes back.
#include "bigbatch/data/gpu_jpeg_decoder.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "../jpeg_codec.h"
#include "bigbatch/common/error.h"
#include "crop_resize_cuda.h"
#include "nvjpeg_batch_decoder.h"

namespace bigbatch {
namespace {

void checkCuda(cudaError_t e, const char* what) {
  BIGBATCH_REQUIRE(e == cudaSuccess, Error, "GPU JPEG decode: {}: {}", what, cudaGetErrorString(e));
}

data_detail::CropResizeDtype kernelDtype(torch::ScalarType t) {
  switch (t) {
    case torch::kFloat:
      return data_detail::CropResizeDtype::kFloat32;
    case torch::kBFloat16:
      return data_detail::CropResizeDtype::kBFloat16;
    case torch::kHalf:
      return data_detail::CropResizeDtype::kFloat16;
    default:
      BIGBATCH_THROW(InvalidArgument, "GPU JPEG decode writes float, bfloat16 or half, not {}",
                     c10::toString(t));
  }
}

// nvJPEG's buffers from libtorch's caching allocators (DALI likewise gives
// nvJPEG pools of its own): a buffer that grows mid-epoch — a larger image,
// a larger batch — then takes a cached block instead of cudaMalloc and
// cudaFreeHost, which wait for the whole device. nvJPEG's V2 allocators are
// stream-ordered: a block is allocated for the stream nvJPEG names, and
// freed on a stream after whose queued work it may be reused. So a device
// block is allocated on that stream, and a freed block (device or pinned)
// is first marked used on the stream it is freed on (recordStream, or the
// host allocator's record_event), so no later allocation reuses it while
// work queued there may still read it. Threading: nvJPEG's calling thread;
// the maps are locked all the same.
class NvjpegCachingAllocators {
 public:
  data_detail::NvjpegAllocators table() {
    data_detail::NvjpegAllocators a;
    a.deviceMalloc = &deviceMalloc;
    a.deviceFree = &deviceFree;
    a.pinnedMalloc = &pinnedMalloc;
    a.pinnedFree = &pinnedFree;
    a.ctx = this;
    return a;
  }

 private:
  using Blocks = std::unordered_map<void*, at::DataPtr>;

  static c10::cuda::CUDAStream streamOf(cudaStream_t stream) {
    return c10::cuda::getStreamFromExternal(stream, c10::cuda::current_device());
  }
  // Keeps `block` (nvJPEG now holds its pointer); 0 on success, as nvJPEG wants.
  int keep(Blocks& blocks, void** ptr, size_t size, at::DataPtr block) {
    *ptr = block.get();
    if (*ptr == nullptr) return size == 0 ? 0 : 1;
    const std::lock_guard<std::mutex> lock(mu_);
    blocks.emplace(*ptr, std::move(block));
    return 0;
  }
  // Takes back the block nvJPEG frees (an undefined DataPtr if unknown).
  at::DataPtr take(Blocks& blocks, void* ptr) {
    const std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks.find(ptr);
    if (it == blocks.end()) return {};
    at::DataPtr block = std::move(it->second);
    blocks.erase(it);
    return block;
  }

  static int deviceMalloc(void* ctx, void** ptr, size_t size, cudaStream_t stream) {
    auto* self = static_cast<NvjpegCachingAllocators*>(ctx);
    try {
      const c10::cuda::CUDAStreamGuard onStream(streamOf(stream));  // the block's stream
      return self->keep(self->device_, ptr, size,
                        c10::cuda::CUDACachingAllocator::get()->allocate(size));
    } catch (...) {  // out of memory: nvJPEG reports ALLOCATOR_FAILURE
      return 1;
    }
  }
  static int deviceFree(void* ctx, void* ptr, size_t, cudaStream_t stream) {
    auto* self = static_cast<NvjpegCachingAllocators*>(ctx);
    at::DataPtr block = self->take(self->device_, ptr);
    if (!block) return ptr == nullptr ? 0 : 1;
    try {
      c10::cuda::CUDACachingAllocator::recordStream(block, streamOf(stream));
    } catch (...) {
      block.release_context();  // without the mark it could be reused early: kept instead
      return 1;
    }
    return 0;  // `block` goes back to the cache here
  }
  static int pinnedMalloc(void* ctx, void** ptr, size_t size, cudaStream_t) {
    auto* self = static_cast<NvjpegCachingAllocators*>(ctx);
    try {
      return self->keep(self->pinned_, ptr, size, at::getHostAllocator(at::kCUDA)->allocate(size));
    } catch (...) {
      return 1;
    }
  }
  static int pinnedFree(void* ctx, void* ptr, size_t, cudaStream_t stream) {
    auto* self = static_cast<NvjpegCachingAllocators*>(ctx);
    at::DataPtr block = self->take(self->pinned_, ptr);
    if (!block) return ptr == nullptr ? 0 : 1;
    try {
      at::getHostAllocator(at::kCUDA)->record_event(ptr, block.get_context(), streamOf(stream));
    } catch (...) {
      block.release_context();
      return 1;
    }
    return 0;
  }

  std::mutex mu_;
  Blocks device_, pinned_;
};

// Device rows start 256 bytes apart at least (the allocator's alignment),
// each image's rows 4-byte aligned.
constexpr int64_t kAlign = 256;
int64_t alignUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

}  // namespace

GpuDecodeSupport gpuJpegDecodeSupport() {
  GpuDecodeSupport s;
  s.built = true;
  return s;
}

struct GpuJpegDecoder::Impl {
  torch::Device device{torch::kCUDA, 0};
  NvjpegCachingAllocators allocators;  // outlives nvjpeg, which frees into it
  std::unique_ptr<data_detail::NvjpegBatchDecoder> nvjpeg;
  // Double buffering: slot k's nvJPEG state and bytes are reused only once
  // its previous batch's work (recorded in `done`) has run.
  struct Slot {
    cudaEvent_t done = nullptr;
    bool used = false;
    JpegBatch batch;  // the bytes nvJPEG may still read
  };
  Slot slots[data_detail::NvjpegBatchDecoder::kSlots];
  int next = 0;
  std::optional<c10::Stream> lastStream;  // the stream of the last decode
  GpuDecodeCounts counts;

  ~Impl() {
    if (!nvjpeg) return;  // refused before anything was made on the device
    const c10::cuda::CUDAGuard onDevice(device);
    for (Slot& s : slots) {
      if (s.done == nullptr) continue;
      if (s.used) cudaEventSynchronize(s.done);  // nvJPEG's states die below
      cudaEventDestroy(s.done);
    }
    nvjpeg.reset();
  }
};

GpuJpegDecoder::GpuJpegDecoder(const torch::Device& device) : impl_(std::make_unique<Impl>()) {
  BIGBATCH_REQUIRE(device.is_cuda(), InvalidArgument,
                   "JPEG decoding on the GPU needs a CUDA device, not {}; set run.device = "
                   "\"cuda\" or data.decode = \"cpu\"",
                   device.str());
  BIGBATCH_REQUIRE(torch::cuda::is_available(), InvalidArgument,
                   "JPEG decoding on the GPU: libtorch sees no GPU (check nvidia-smi and "
                   "CUDA_VISIBLE_DEVICES), or set data.decode = \"cpu\"");
  Impl& m = *impl_;
  m.device = device.has_index() ? device : torch::Device(torch::kCUDA, c10::cuda::current_device());
  const c10::cuda::CUDAGuard onDevice(m.device);
  try {
    m.nvjpeg = std::make_unique<data_detail::NvjpegBatchDecoder>(m.allocators.table());
  } catch (const std::exception& e) {
    BIGBATCH_THROW(IoError,
                   "JPEG decoding on the GPU cannot start: {}; check the driver (nvidia-smi) and "
                   "that libnvjpeg.so.13 is the one built against, or set data.decode = \"cpu\"",
                   e.what());
  }
  for (Impl::Slot& s : m.slots) {
    checkCuda(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "cudaEventCreate");
  }
}

GpuJpegDecoder::~GpuJpegDecoder() = default;

const std::string& GpuJpegDecoder::backend() const { return impl_->nvjpeg->backend(); }
const torch::Device& GpuJpegDecoder::device() const { return impl_->device; }
GpuDecodeCounts GpuJpegDecoder::counts() const { return impl_->counts; }

GpuDecodedBatch GpuJpegDecoder::decode(JpegBatch&& batch, const ImageAugment& a,
                                       torch::ScalarType dtype, bool channelsLast,
                                       const c10::Stream& stream) {
  Impl& m = *impl_;
  BIGBATCH_REQUIRE(stream.device() == m.device, InvalidArgument,
                   "GPU JPEG decode: a stream of {} for a decoder on {}", stream.device().str(),
                   m.device.str());
  const data_detail::CropResizeDtype outDtype = kernelDtype(dtype);
  const c10::cuda::CUDAGuard onDevice(m.device);
  const c10::cuda::CUDAStreamGuard onStream(stream);  // every allocation below is on `stream`
  const cudaStream_t raw = c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream).stream();

  // nvJPEG's decoupled buffers are shared by both slots and ordered only on
  // one stream: a decode on another stream (evaluation after an epoch)
  // first waits for everything queued on the last one.
  if (m.lastStream && *m.lastStream != stream) {
    for (const Impl::Slot& s : m.slots) {
      if (s.used) checkCuda(cudaEventSynchronize(s.done), "cudaEventSynchronize");
    }
  }
  m.lastStream = stream;
  const int slotIndex = m.next;
  m.next = (m.next + 1) % data_detail::NvjpegBatchDecoder::kSlots;
  Impl::Slot& slot = m.slots[slotIndex];
  if (slot.used) checkCuda(cudaEventSynchronize(slot.done), "cudaEventSynchronize");
  slot.batch = std::move(batch);  // the previous batch's bytes are released here
  const std::vector<JpegSample>& samples = slot.batch.samples;
  const size_t n = samples.size();

  // Each image's crop, as the CPU path takes it from a full-size decode:
  // the region nvJPEG is asked for.
  std::vector<CropRect> crop(n);
  std::vector<data_detail::NvjpegInput> in(n);
  for (size_t i = 0; i < n; ++i) {
    const JpegSample& s = samples[i];
    crop[i] = cropRect(s.original, s.original, s.plan);
    data_detail::NvjpegInput& x = in[i];
    x.data = s.bytes.data();
    x.size = s.bytes.size();
    x.width = static_cast<int>(s.original.width);
    x.height = static_cast<int>(s.original.height);
    x.regionX = static_cast<int>(crop[i].left);
    x.regionY = static_cast<int>(crop[i].top);
    x.regionWidth = static_cast<int>(crop[i].width);
    x.regionHeight = static_cast<int>(crop[i].height);
  }
  const std::vector<data_detail::NvjpegPlan> plan = m.nvjpeg->plan(in, slotIndex);

  // One device buffer for every image nvJPEG writes, RGB interleaved.
  std::vector<int64_t> offset(n, 0);
  std::vector<size_t> pitch(n, 0);
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (plan[i].route == data_detail::NvjpegRoute::kHost) continue;
    pitch[i] = static_cast<size_t>(alignUp(3 * static_cast<int64_t>(plan[i].width), 4));
    offset[i] = total;
    total = alignUp(total + static_cast<int64_t>(pitch[i]) * plan[i].height, kAlign);
  }
  const torch::Tensor pixels =
      torch::empty({std::max<int64_t>(total, 1)}, torch::dtype(torch::kUInt8).device(m.device));
  std::vector<uint8_t*> out(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    if (plan[i].route != data_detail::NvjpegRoute::kHost)
      out[i] = pixels.data_ptr<uint8_t>() + offset[i];
  }
  std::vector<std::string> why;
  try {
    why = m.nvjpeg->decode(in, plan, out, pitch, slotIndex, raw);
  } catch (const std::exception& e) {
    BIGBATCH_THROW(Error, "GPU JPEG decode: {}", e.what());
  }

  GpuDecodedBatch result;
  std::vector<data_detail::CropResizeItem> items;
  std::vector<torch::Tensor> uploaded;  // host-decoded images, until the kernel is queued
  for (size_t i = 0; i < n; ++i) {
    const JpegSample& s = samples[i];
    data_detail::CropResizeItem item;
    item.flip = s.plan.flip ? 1 : 0;
    item.height = static_cast<int32_t>(crop[i].height);
    item.width = static_cast<int32_t>(crop[i].width);
    if (why[i].empty()) {
      item.pixels = out[i];
      item.pitch = static_cast<int64_t>(pitch[i]);
      item.top = plan[i].region ? 0 : static_cast<int32_t>(crop[i].top);
      item.left = plan[i].region ? 0 : static_cast<int32_t>(crop[i].left);
      ++(plan[i].route == data_detail::NvjpegRoute::kHardware ? m.counts.hardware : m.counts.cuda);
      if (plan[i].region) ++m.counts.region;
    } else {
      // What nvJPEG did not decode, on the host as the CPU path decodes it
      // (DCT-scaled to what the crop needs), then copied to the device.
      Image image;
      try {
        const DecodeRequest request{static_cast<double>(crop[i].height),
                                    static_cast<double>(crop[i].width), a.outHeight, a.outWidth};
        image = data_detail::decodeJpeg(s.bytes.data(), s.bytes.size(), request);
      } catch (const IoError& e) {
        result.failed.emplace_back(i,
                                   fmt::format("nvJPEG: {}; libjpeg-turbo: {}", why[i], e.what()));
        continue;
      }
      const torch::Tensor host =
          torch::from_blob(image.pixels.data(), {static_cast<int64_t>(image.pixels.size())},
                           torch::kUInt8)
              .pin_memory();
      uploaded.push_back(host.to(m.device, /*non_blocking=*/true));
      const CropRect r = cropRect({image.height, image.width}, s.original, s.plan);
      item.pixels = uploaded.back().data_ptr<uint8_t>();
      item.pitch = 3 * image.width;
      item.top = static_cast<int32_t>(r.top);
      item.left = static_cast<int32_t>(r.left);
      item.height = static_cast<int32_t>(r.height);
      item.width = static_cast<int32_t>(r.width);
      ++m.counts.host;
    }
    item.row = static_cast<int32_t>(items.size());
    items.push_back(item);
    result.kept.push_back(i);
  }

  const int64_t k = static_cast<int64_t>(items.size());
  result.images =
      torch::empty({k, 3, a.outHeight, a.outWidth}, torch::dtype(dtype).device(m.device),
                   channelsLast ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous);
  if (k > 0) {
    // The table from pinned memory on the stream (the host allocator keeps
    // the pinned block until the copy has run).
    const int64_t bytes = k * static_cast<int64_t>(sizeof(data_detail::CropResizeItem));
    torch::Tensor table = torch::empty({bytes}, torch::dtype(torch::kUInt8).pinned_memory(true));
    std::memcpy(table.data_ptr<uint8_t>(), items.data(), static_cast<size_t>(bytes));
    const torch::Tensor deviceTable = table.to(m.device, /*non_blocking=*/true);
    data_detail::CropResizeOutput o;
    o.data = result.images.data_ptr();
    o.dtype = outDtype;
    o.strideN = result.images.stride(0);
    o.strideC = result.images.stride(1);
    o.strideH = result.images.stride(2);
    o.strideW = result.images.stride(3);
    o.height = static_cast<int32_t>(a.outHeight);
    o.width = static_cast<int32_t>(a.outWidth);
    const Normalisation norm = normalisationOf(a, 3);
    for (int c = 0; c < 3; ++c) {
      o.scale[c] = norm.scale[static_cast<size_t>(c)];
      o.shift[c] = norm.shift[static_cast<size_t>(c)];
    }
    const char* error = data_detail::launchCropResize(
        reinterpret_cast<const data_detail::CropResizeItem*>(deviceTable.data_ptr<uint8_t>()),
        static_cast<int32_t>(k), o, raw);
    BIGBATCH_REQUIRE(error == nullptr, Error, "GPU JPEG decode: the crop-resize kernel: {}",
                     error ? error : "");
  }
  checkCuda(cudaEventRecord(slot.done, raw), "cudaEventRecord");
  slot.used = true;
  return result;
}

}  // namespace bigbatch
