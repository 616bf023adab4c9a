// One collective of the bigbatch backend as torch.distributed sees it: a
// c10d::Work whose wait() returns once the communication thread has run
// it and its future has completed (as gloo's: `w.wait();
// w.get_future().value()` holds), and whose future — what DDP's reducer and its comm hooks chain on
// (ProcessGroupGloo's AsyncWork is the model) — holds the list of output
// tensors, or the error, named as the collective raised it.
//
// Threading: finishRun() once, from the communication thread;
// completeFuture() once, after it, on a CompletionPool thread
// (completion_pool.h); everything else from any thread.
#pragma once

#include <ATen/core/ivalue.h>

#include <exception>
#include <vector>

#include "torch_api.h"

namespace bigbatch::torch_backend {

class BigbatchWork : public ::c10d::Work {
 public:
  BigbatchWork(int rank, ::c10d::OpType type, const char* profilingTitle,
               std::vector<at::Tensor> outputs);

  // The collective is done (or failed with `error`): wait() returns (or
  // raises). On the communication thread.
  void finishRun(std::exception_ptr error = nullptr);
  // The future completes with the outputs (or the error): its callbacks run
  // here. On a completion thread.
  void completeFuture(std::exception_ptr error = nullptr);

  // Also waits for the future (completed before its callbacks run, so a
  // callback that waits on its own Work does not deadlock).
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace bigbatch::torch_backend
