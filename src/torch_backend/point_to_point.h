// PointToPoint: the bigbatch backend's send and recv (torch.distributed's
// send, recv, isend, irecv, batch_isend_irecv, and recv from any source).
//
// A send is not a collective: rank 0 reaches its isend and rank 1 its irecv
// whenever each gets there, around whatever collectives lie between, and
// two ranks that each isend and then irecv must both get their messages. So
// an operation cannot run to its end on the communication thread, one at a
// time, as a collective does: the thread posts it (isend or irecv, never
// blocking) when it reaches it in issue order, and tests the operations in
// flight after every task and whenever it would otherwise idle
// (CollectiveScheduler's idle poll), completing each as its transport
// reports it done — as gloo's unbound buffers or MPI's requests do.
//
// The operations use a communicator of their own (a split of the group's,
// made with the group), so a script's tags never meet a collective's; a
// peer's error notice arrives on the group's communicator, which poll()
// checks too. Each operation's deadline is the group's timeout from when it
// was posted: past it, it fails with a TimeoutError naming the peer.
//
// An operation abandoned unfinished (failed, or ended with the group) is
// cancelled by its transport, but a matched transfer may still touch its
// buffer: the buffer is kept until this object goes.
//
// Threading: one thread at a time — the communication thread, and once it
// has stopped, the thread that ends the group (its last polls, failAll and
// the destructor).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/comm/communicator.h"

namespace bigbatch::torch_backend {

class PointToPoint {
 public:
  // `source`: the rank the message came from (a receive), else the peer.
  using Done = std::function<void(std::exception_ptr error, int source)>;
  // The tags a script may use: MPI guarantees 0 .. 32767, and 32767 is the
  // transports' error notice.
  static constexpr int kMaxTag = 32766;

  // `own`: this object's communicator; `notices`: the group's, whose
  // peers' error notices end the operations in flight.
  PointToPoint(std::unique_ptr<Communicator> own, Communicator& notices);
  // In-flight operations are abandoned: their transports cancel them.
  ~PointToPoint();

  // `peer` -1 receives from any rank.
  void postSend(const at::Tensor& tensor, int peer, int tag, Done done);
  void postRecv(const at::Tensor& tensor, int peer, int tag, Done done);
  // Tests every operation in flight: completes those done, fails those past
  // their deadline or whose transport failed. True while any remains.
  bool poll();
  // Fails every operation in flight with `why` (the group broke).
  void failAll(const std::string& why);
  bool idle() const { return inFlight_.empty(); }

 private:
  struct Op {
    std::unique_ptr<Request> request;
    at::Tensor staged;  // what the transport reads or writes (contiguous)
    at::Tensor target;  // a receive's tensor, when it is not `staged`
    bool isSend = false;
    int peer = -1, tag = 0;
    std::chrono::steady_clock::time_point deadline;
    Done done;
  };
  void post(Op op, const at::Tensor& tensor);

  // Ends `op` unfinished: its request goes (the transport cancels it), its
  // buffer stays.
  void abandon(Op& op);

  std::unique_ptr<Communicator> comm_;
  Communicator& notices_;
  std::deque<Op> inFlight_;
  std::vector<at::Tensor> abandoned_;  // buffers of operations ended unfinished
};

}  // namespace bigbatch::torch_backend
