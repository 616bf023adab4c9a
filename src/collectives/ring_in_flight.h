// A ring allreduce that advances without blocking, so that several can be in
// flight while the caller does other work: the hierarchical allreduce's
// pipeline (hierarchical_allreduce.cpp) keeps each piece's inter-host ring
// moving while it stages the next piece and brings the last one home
// through shared memory, as NCCL's and Horovod's pipelined hierarchies
// overlap their in-node and cross-node steps.
//
// The ring is RingAllreduce's (ring_pass.h): n-1 reduce-scatter steps, in
// which rank i sends chunk (i - s - 1) and adds chunk (i - s - 2), then n-1
// allgather steps, sending chunk (i - s) and receiving chunk (i - s - 1) in
// place — one message per step (the pipeline's pieces take the place of
// the ring's segments). Step s+1 is posted once both messages of step s
// have completed; every call to progress() moves as many steps as have.
//
// Two rings in flight on one communicator must use different tags: a
// rank's messages of one ring could otherwise match the other's receives.
//
// Threading: one thread per rank, like every collective. The communicator
// must poll its requests (Communicator::pollsRequests(): MPI, UCX, the
// in-process one; not Gloo's, whose test() cannot be called on a request
// not yet done).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

class RingInFlight {
 public:
  // Starts the allreduce of `count` elements at `data` over `comm` (its
  // first step's messages are posted here). `data` must outlive the ring.
  RingInFlight(Communicator& comm, void* data, size_t count, DataType type, int tag);
  RingInFlight(const RingInFlight&) = delete;
  RingInFlight& operator=(const RingInFlight&) = delete;

  // Completes what has arrived, posts what follows, never blocks; true
  // once every step is done.
  bool progress();
  // Blocks until every step is done (the requests' waits: the
  // communicator's deadline and its peers' errors).
  void finish();

 private:
  void post();      // the current step's receive and send
  void complete();  // both done: add a reduce step's chunk, move to the next step

  Communicator& comm_;
  uint8_t* data_;
  const size_t count_;
  const DataType type_;
  const size_t elem_;
  const int tag_, n_, rank_;
  int step_ = 0;                          // 0 .. 2(n-1); below n-1 a reduce-scatter step
  size_t recvBegin_ = 0, recvCount_ = 0;  // the current step's received chunk
  std::unique_ptr<uint8_t[]> incoming_;   // a reduce step's received chunk
  // After incoming_: destroyed first, so that a ring abandoned by an error
  // cancels its receive before the buffer it writes is freed.
  std::unique_ptr<Request> recv_, send_;
};

}  // namespace bigbatch
