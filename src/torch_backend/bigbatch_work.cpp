#include "bigbatch_work.h"

namespace bigbatch::torch_backend {

BigbatchWork::BigbatchWork(int rank, ::c10d::OpType type, const char* profilingTitle,
                           std::vector<at::Tensor> outputs)
    : ::c10d::Work(rank, type, profilingTitle),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {
  // The future runs its callbacks in the order they were added, after it is
  // marked complete: this one, added first, runs before any of a script's.
  future_->addCallback([done = completed_](c10::ivalue::Future&) {
    {
      const std::lock_guard<std::mutex> lock(done->mutex);
      done->done = true;
    }
    done->changed.notify_all();
  });
}

void BigbatchWork::finishRun(std::exception_ptr error) { finish(error); }

bool BigbatchWork::wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const bool done = ::c10d::Work::wait(timeout);  // raises the collective's error
  if (timeout == kNoTimeout) {
    future_->wait();
    return done;
  }
  std::unique_lock<std::mutex> lock(completed_->mutex);
  // The same words as c10d's Work::wait past its timeout.
  TORCH_CHECK(completed_->changed.wait_until(lock, deadline, [this] { return completed_->done; }),
              "Operation timed out! (bigbatch: the collective ran, but its future did not "
              "complete within the timeout)");
  return done;
}

int BigbatchWork::sourceRank() const {
  const int source = source_.load();
  TORCH_CHECK(source >= 0, "sourceRank() is known only for a completed recv (bigbatch backend)");
  return source;
}

bool BigbatchWork::isCompleted() {
  return ::c10d::Work::isCompleted() && future_->completed();
}

void BigbatchWork::completeFuture(std::exception_ptr error) {
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

}  // namespace bigbatch::torch_backend
