#include "bigbatch_work.h"

namespace bigbatch::torch_backend {

BigbatchWork::BigbatchWork(int rank, ::c10d::OpType type, const char* profilingTitle,
                           std::vector<at::Tensor> outputs)
    : ::c10d::Work(rank, type, profilingTitle),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

void BigbatchWork::finishRun(std::exception_ptr error) { finish(error); }

bool BigbatchWork::wait(std::chrono::milliseconds timeout) {
  const bool done = ::c10d::Work::wait(timeout);  // raises the collective's error
  future_->wait();
  return done;
}

void BigbatchWork::completeFuture(std::exception_ptr error) {
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
}

}  // namespace bigbatch::torch_backend
