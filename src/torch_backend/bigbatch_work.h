// One collective of the bigbatch backend as torch.distributed sees it: a
// c10d::Work whose wait() returns once the communication thread has run
// it and its future has completed (as gloo's: `w.wait();
// w.get_future().value()` holds), and whose future — what DDP's reducer and its comm hooks chain on
// (ProcessGroupGloo's AsyncWork is the model) — holds the list of output
// tensors, or the error, named as the collective raised it.
//
// It is completed (isCompleted()) only when both have happened — the
// collective ran and its future completed — so a script that polls
// `w.is_completed()` and then reads `w.get_future().value()` finds the
// value there; and wait(timeout) keeps one deadline over both.
//
// Threading: finishRun() once, from the communication thread;
// completeFuture() once, after it, on a CompletionPool thread
// (completion_pool.h); everything else from any thread.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
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
  // callback that waits on its own Work does not deadlock), within the same
  // timeout: past it, raises as c10d's Work::wait does.
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  bool isCompleted() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // A receive's sender (torch.distributed's recv returns it); set before
  // finishRun.
  int sourceRank() const override;
  void setSourceRank(int rank) { source_ = rank; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  // Set by the future's first callback (registered before any other): the
  // future completed. Shared with that callback, which the future keeps.
  struct Completed {
    std::mutex mutex;
    std::condition_variable changed;
    bool done = false;  // guarded by mutex
  };
  std::vector<at::Tensor> outputs_;
  std::atomic<int> source_{-1};
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<Completed> completed_ = std::make_shared<Completed>();
};

}  // namespace bigbatch::torch_backend
