#include "step/step_graph.h"

#include "bigbatch/common/error.h"

#ifdef BIGBATCH_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace bigbatch::train_detail {

std::atomic<int64_t>& StepGraph::replaysInProcess() {
  static std::atomic<int64_t> count{0};
  return count;
}

#ifdef BIGBATCH_WITH_CUDA

struct StepGraph::Impl {
  // A graph cannot be captured on the legacy default stream: a pool stream,
  // the same for the warm-up and the capture.
  explicit Impl(const torch::Device& d)
      : device(d), side(c10::cuda::getStreamFromPool(false, d.index())) {}

  // `body` on the side stream, ordered after the current stream's queued
  // work, and the current stream after it (also when `body` throws).
  template <typename Body>
  void onSide(const Body& body) {
    const c10::cuda::CUDAGuard onDevice(device);
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
    at::cuda::CUDAEvent queued;
    queued.record(current);
    queued.block(side);
    try {
      const c10::cuda::CUDAStreamGuard onSideStream(side);
      body();
    } catch (...) {
      try {
        join(current);
      } catch (...) {  // the body's error is the one to report
      }
      throw;
    }
    join(current);
  }

  void join(const c10::cuda::CUDAStream& current) {
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(current);
  }

  torch::Device device;
  c10::cuda::CUDAStream side;
  at::cuda::CUDAGraph graph;
  bool captured = false;
};

bool StepGraph::available() { return true; }

StepGraph::StepGraph(const torch::Device& device) {
  BIGBATCH_REQUIRE(device.is_cuda(), InvalidArgument,
                   "run.cuda_graph captures a step on a CUDA device, not {}; set run.device = "
                   "\"cuda\" or run.cuda_graph = false",
                   device.str());
  impl_ = std::make_unique<Impl>(device);
}

StepGraph::~StepGraph() = default;

void StepGraph::warmUp(const std::function<void()>& body) { impl_->onSide(body); }

void StepGraph::capture(const std::function<void()>& body) {
  {
    // What the warm-up and the eager steps left in the allocator's cache
    // goes back to the device first, as torch.cuda.graph does (synchronize,
    // then empty_cache): the graph's private pool cannot reuse those
    // blocks, and a step the size of ResNet-50's at batch 256 would
    // otherwise hold its memory three times during the capture.
    const c10::cuda::CUDAGuard onDevice(impl_->device);
    c10::cuda::device_synchronize();
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
  impl_->onSide([&] {
    impl_->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      body();
    } catch (...) {
      try {
        impl_->graph.capture_end();
      } catch (...) {
      }
      impl_->graph.reset();
      throw;
    }
    impl_->graph.capture_end();
  });
  impl_->captured = true;
}

bool StepGraph::captured() const { return impl_->captured; }

void StepGraph::replay() {
  BIGBATCH_CHECK(impl_->captured, Error, "StepGraph::replay() before capture()");
  const c10::cuda::CUDAGuard onDevice(impl_->device);
  impl_->graph.replay();
  replaysInProcess().fetch_add(1);
}

#else

struct StepGraph::Impl {};

bool StepGraph::available() { return false; }

StepGraph::StepGraph(const torch::Device&) {
  BIGBATCH_THROW(InvalidArgument,
                 "run.cuda_graph needs the CUDA build of bigbatch (scripts/build-cuda, "
                 "docs/GPU.md); set run.cuda_graph = false");
}

StepGraph::~StepGraph() = default;
void StepGraph::warmUp(const std::function<void()>&) {}
void StepGraph::capture(const std::function<void()>&) {}
bool StepGraph::captured() const { return false; }
void StepGraph::replay() {}

#endif

}  // namespace bigbatch::train_detail
