// NcclExchange: the gradient buckets of a model on a GPU summed across the
// ranks by NCCL on the device, as backward produces them — no host copy, no
// host thread (the path when every rank has a GPU of its own).
//
// Per bucket b: ready(b), on the thread that ran the backward once b's
// gradients are written, records an event on that thread's current
// stream, makes NCCL's stream wait for it, and enqueues b's exchange on
// NCCL's stream — the device codec's ops (device_codec.h) around NCCL's
// in-place allreduce: with fp32 on the wire the allreduce of b (ring:
// 2·S·(n-1)/n bytes sent per rank for S bytes); fp16/bf16 cast there and
// back; PowerSGD's products, factors and reconstruction. finish(), after
// the last ready(), records an event on NCCL's stream, makes the compute
// stream wait for it — so the optimizer, enqueued after, reads the sums in
// stream order — and waits on the host, under the deadline, for NCCL's
// stream: a peer that stopped is caught there and the communicator
// aborted, instead of a later read-back hanging with no deadline.
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

#include "bigbatch/comm/nccl_communicator.h"
#include "bigbatch/ddp/bucket_layout.h"
#include "device_codec.h"

namespace bigbatch {
class StallWatchdog;
}

namespace bigbatch::ddp_detail {

class NcclExchange {
 public:
  // `buckets`: the flat fp32 gradient buckets, all on `stream`'s device,
  // laid out as `layout` says; `stream`: the torch stream whose native
  // handle is nccl.stream(). Both the layout and the codec outlive this.
  NcclExchange(NcclCommunicator& nccl, c10::Stream stream, const std::vector<torch::Tensor>& buckets,
               const std::vector<Bucket>& layout, DeviceCodec& codec);

  // Bucket b's gradients are written (in the current stream's order).
  void ready(size_t b);
  // Every bucket was handed over: the compute stream waits for the sums,
  // the host for NCCL. Returns the seconds the host waited.
  double finish(StallWatchdog* watchdog);

 private:
  // NCCL's allreduce as the codec's collective.
  class Wire : public DeviceWireSum {
   public:
    explicit Wire(NcclCommunicator& nccl) : nccl_(nccl) {}
    void sum(const torch::Tensor& values) override;

   private:
    NcclCommunicator& nccl_;
  };

  NcclCommunicator& nccl_;
  c10::Stream stream_;
  torch::Device device_;
  std::vector<torch::Tensor> buckets_;
  const std::vector<Bucket>& layout_;
  DeviceCodec& codec_;
  Wire wire_;
  std::vector<std::unique_ptr<c10::Event>> ready_;
  c10::Event done_;
};

}  // namespace bigbatch::ddp_detail
