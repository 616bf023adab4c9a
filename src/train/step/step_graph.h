// StepGraph: one training step captured as a CUDA graph and replayed
// (run.cuda_graph; issue 55) — the form of PyTorch's torch.cuda.graph and
// make_graphed_callables: captured on a side stream of its own, after
// warm-up steps that let cuDNN choose its algorithms and one more pass on
// that very stream (warmUp(): what is made per stream — cuBLAS's workspace,
// cuDNN's per-stream state — is made there, not inside the capture, as
// torch.cuda.graph's documentation asks), into a private memory pool whose
// blocks (activations, the gradients, the step's outputs) stay the graph's;
// replayed as one launch on the current stream. What changes from step to
// step must live in device memory: TrainStep fills the static input before
// each replay and the optimizer writes its per-step values
// (optim/device_step.h). The CPU build has none: available() is false and
// the constructor refuses, naming the CUDA build.
//
// Internal to src/train. Threading: the training thread. Captured in the
// thread-local mode, so the input pipeline's threads may allocate pinned
// memory while the step is captured.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

namespace bigbatch::train_detail {

class StepGraph {
 public:
  static bool available();
  explicit StepGraph(const torch::Device& device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Runs `body` eagerly on the capture stream (after the work queued on
  // the current stream, which then waits for it): the warm-up there.
  void warmUp(const std::function<void()>& body);
  // Runs `body` once under capture (nothing it queues executes): on the
  // capture stream, a stream from the pool taken at construction, that
  // first waits for the work queued on the current stream; the current
  // stream then waits for it. An exception from `body` ends the capture and
  // is rethrown; the graph stays uncaptured.
  void capture(const std::function<void()>& body);
  bool captured() const;
  // One launch of the whole step on the current stream.
  void replay();
  // Replays by every StepGraph of this process so far (what a test reads
  // to know the captured step ran; 0 in the CPU build).
  static int64_t replays() { return replaysInProcess().load(); }

 private:
  static std::atomic<int64_t>& replaysInProcess();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bigbatch::train_detail
