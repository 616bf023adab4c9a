#include "point_to_point.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "bigbatch/common/error.h"

namespace bigbatch::torch_backend {

PointToPoint::PointToPoint(std::unique_ptr<Communicator> own, Communicator& notices)
    : comm_(std::move(own)), notices_(notices) {}

PointToPoint::~PointToPoint() {
  for (Op& op : inFlight_) abandon(op);
  inFlight_.clear();
}

void PointToPoint::abandon(Op& op) {
  op.request.reset();
  if (op.staged.defined()) abandoned_.push_back(op.staged);
}

void PointToPoint::post(Op op, const at::Tensor& tensor) {
  const size_t bytes = static_cast<size_t>(tensor.numel()) * tensor.element_size();
  op.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(comm_->timeoutMs());
  try {
    if (op.isSend) {
      op.staged = tensor.contiguous();
      op.request = comm_->isend(op.staged.data_ptr(), bytes, op.peer, op.tag);
    } else {
      op.staged = tensor.is_contiguous() ? tensor : at::empty(tensor.sizes(), tensor.options());
      if (!op.staged.is_same(tensor)) op.target = tensor;
      op.request = op.peer < 0 ? comm_->irecvAny(op.staged.data_ptr(), bytes, op.tag)
                               : comm_->irecv(op.staged.data_ptr(), bytes, op.peer, op.tag);
    }
  } catch (...) {
    op.done(std::current_exception(), op.peer);
    return;
  }
  inFlight_.push_back(std::move(op));
}

void PointToPoint::postSend(const at::Tensor& tensor, int peer, int tag, Done done) {
  Op op;
  op.isSend = true;
  op.peer = peer;
  op.tag = tag;
  op.done = std::move(done);
  post(std::move(op), tensor);
}

void PointToPoint::postRecv(const at::Tensor& tensor, int peer, int tag, Done done) {
  Op op;
  op.peer = peer;
  op.tag = tag;
  op.done = std::move(done);
  post(std::move(op), tensor);
}

bool PointToPoint::poll() {
  if (inFlight_.empty()) return false;
  try {
    notices_.pollPeerErrors();  // a peer that failed said so on the group's communicator
  } catch (const std::exception& e) {
    failAll(e.what());
    return false;
  }
  const auto now = std::chrono::steady_clock::now();
  // Completed after the loop: a failure's callback fails what is still in
  // flight (failAll), which must not happen under this loop's iterator.
  std::vector<std::pair<Done, std::pair<std::exception_ptr, int>>> finishedOps;
  for (auto it = inFlight_.begin(); it != inFlight_.end();) {
    Op& op = *it;
    std::exception_ptr error;
    bool finished = false;
    try {
      finished = op.request->test();
      if (finished && op.target.defined()) op.target.copy_(op.staged);
      if (!finished && now > op.deadline) {
        const std::string peer =
            op.peer >= 0 ? fmt::format("rank {}", op.peer) : std::string("no rank");
        BIGBATCH_THROW(TimeoutError,
                       "{} did not {} this rank within {} ms (a {} of {} bytes, tag {}); the peer "
                       "may have failed, hung, or not made the matching {}",
                       peer, op.isSend ? "receive from" : "send to", comm_->timeoutMs(),
                       op.isSend ? "send" : "recv", op.staged.numel() * op.staged.element_size(),
                       op.tag, op.isSend ? "recv" : "send");
      }
    } catch (...) {
      error = std::current_exception();
      finished = true;
    }
    if (!finished) {
      ++it;
      continue;
    }
    const int source = op.request->source() >= 0 ? op.request->source() : op.peer;
    finishedOps.push_back({std::move(op.done), {error, source}});
    if (error) abandon(op);
    it = inFlight_.erase(it);
  }
  for (auto& [done, outcome] : finishedOps) done(outcome.first, outcome.second);
  return !inFlight_.empty();
}

void PointToPoint::failAll(const std::string& why) {
  std::deque<Op> failing;
  failing.swap(inFlight_);
  for (Op& op : failing) {
    Done done = std::move(op.done);
    const int peer = op.peer;
    abandon(op);
    done(std::make_exception_ptr(PeerError(why)), peer);
  }
}

}  // namespace bigbatch::torch_backend
