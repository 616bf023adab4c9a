#include "ring_in_flight.h"

#include "bigbatch/collectives/allreduce.h"
#include "fold.h"
#include "ring_pass.h"

namespace bigbatch {

RingInFlight::RingInFlight(Communicator& comm, void* data, size_t count, DataType type, int tag)
    : comm_(comm),
      data_(static_cast<uint8_t*>(data)),
      count_(count),
      type_(type),
      elem_(elementSize(type)),
      tag_(tag),
      n_(comm.size()),
      rank_(comm.rank()) {
  if (n_ == 1) return;  // nothing to do: 2(n-1) = 0 steps
  incoming_ =
      receiveBuffer((count + static_cast<size_t>(n_) - 1) / static_cast<size_t>(n_) * elem_);
  post();
}

void RingInFlight::post() {
  const int steps = n_ - 1;
  const bool reduce = step_ < steps;
  const int s = reduce ? step_ : step_ - steps;
  auto mod = [n = n_](int c) { return ((c % n) + n) % n; };
  // As ringPass: the reduce-scatter's shift -1 leaves rank i with chunk i,
  // which the allgather (shift 0) sends first.
  const int shift = reduce ? -1 : 0;
  const int sendChunk = mod(rank_ - s + shift), recvChunk = mod(rank_ - s - 1 + shift);
  auto begin = [&](int c) { return ringChunkBegin(count_, n_, c); };
  recvBegin_ = begin(recvChunk);
  recvCount_ = begin(recvChunk + 1) - recvBegin_;
  const size_t sendBegin = begin(sendChunk), sendCount = begin(sendChunk + 1) - sendBegin;
  const int right = (rank_ + 1) % n_, left = (rank_ - 1 + n_) % n_;
  // An empty chunk still sends its (empty) message: both sides count steps alike.
  recv_ = comm_.irecv(reduce ? incoming_.get() : data_ + recvBegin_ * elem_, recvCount_ * elem_,
                      left, tag_);
  send_ = comm_.isend(data_ + sendBegin * elem_, sendCount * elem_, right, tag_);
}

void RingInFlight::complete() {
  const int steps = n_ - 1;
  if (step_ < steps) sumInto(type_, data_ + recvBegin_ * elem_, incoming_.get(), recvCount_);
  recv_.reset();
  send_.reset();
  if (++step_ < 2 * steps) post();
}

bool RingInFlight::progress() {
  while (step_ < 2 * (n_ - 1)) {
    // One test moves every transfer of the transport on (MPI's progress
    // engine, UCX's worker); each unsuccessful one also polls for peers'
    // errors, so the send is tested only once the receive is done.
    if (!recv_->test() || !send_->test()) return false;
    complete();
  }
  return true;
}

void RingInFlight::finish() {
  while (step_ < 2 * (n_ - 1)) {
    recv_->wait();
    send_->wait();
    complete();
  }
}

}  // namespace bigbatch
