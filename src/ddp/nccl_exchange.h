// NcclExchange: the gradient buckets of a model on a GPU summed across the
// ranks by NCCL on the device, as backward produces them — no host copy, no
// host thread (the path when every rank has a GPU of its own).
//
// Per bucket b (S bytes of fp32 gradients): ready(b), on the thread that
// ran the backward once b's gradients are written, records an event on that
// thread's current stream, makes NCCL's stream wait for it, and enqueues on
// NCCL's stream: with fp32 on the wire the in-place allreduce of b (ring:
// 2·S·(n-1)/n bytes sent per rank); with fp16/bf16, b·(1/n) cast into b's
// 16-bit wire buffer (S/2 bytes; pre-divided so the sum cannot overflow,
// as the host path does), the allreduce of that, and wire·n cast back into
// b. finish(), after the last ready(), records an event on NCCL's stream,
// makes the compute stream wait for it — so the optimizer, enqueued after,
// reads the sums in stream order — and waits on the host, under the
// deadline, for NCCL's stream: a peer that stopped is caught there and the
// communicator aborted, instead of a later read-back hanging with no
// deadline.
//
// Threading: ready() from the thread that runs backward (the autograd
// device thread on CUDA), finish() from the compute thread after backward
// returned — never both at once, as NcclCommunicator requires. Internal to
// src/ddp.
#pragma once

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/torch.h>

#include <memory>
#include <vector>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/comm/nccl_communicator.h"

namespace bigbatch {
class StallWatchdog;
}

namespace bigbatch::ddp_detail {

class NcclExchange {
 public:
  // `buckets`: the flat fp32 gradient buckets, all on `stream`'s device;
  // `stream`: the torch stream whose native handle is nccl.stream().
  NcclExchange(NcclCommunicator& nccl, c10::Stream stream, const std::vector<torch::Tensor>& buckets,
               DataType wireType);

  // Bucket b's gradients are written (in the current stream's order).
  void ready(size_t b);
  // Every bucket was handed over: the compute stream waits for the sums,
  // the host for NCCL. Returns the seconds the host waited.
  double finish(StallWatchdog* watchdog);

 private:
  NcclCommunicator& nccl_;
  c10::Stream stream_;
  torch::Device device_;
  std::vector<torch::Tensor> buckets_;
  std::vector<torch::Tensor> wire_;  // 16-bit copies on the wire (empty for fp32)
  DataType wireType_;
  torch::Tensor inverseRanks_;  // 1/n as a wrapped scalar (no type promotion)
  std::vector<std::unique_ptr<c10::Event>> ready_;
  c10::Event done_;
};

}  // namespace bigbatch::ddp_detail
