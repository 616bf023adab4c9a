// DevicePowerSgdCodec: PowerSGD (Vogels, Karimireddy & Jaggi, NeurIPS
// 2019) where the model runs — on the GPU, on the NCCL exchange's stream —
// the algorithm of the host codec (powersgd_codec.h: the plan, error
// feedback, warm-started Q with unit columns, P = X Q summed and
// orthogonalised, Q = X^T P summed, M ~ P Q^T, E = X - P Q^T / N, its
// factors and the uncompressed values in the wire type) as ATen ops on
// device tensors: cuBLAS for the products, modified Gram-Schmidt in double
// one column at a time (each column projected out of all later ones in one
// rank-1 update).
//
// What differs from the host codec, and why:
//   * nothing waits on the host: the step's checks are device-side. A
//     step whose summed P or Q is not finite leaves NaN in the compressed
//     gradients (the loss scaler skips the step), zero error memory and
//     the last finite Q — as the host codec does — chosen by masks, so the
//     Q collective is always sent (the host codec skips it; every rank of
//     one transport does the same) and the step is not logged (the loss
//     scaler logs its skip). A Q with a zero or non-finite column falls
//     back to its first draw the same way.
//   * the bits: every rank computes P Q^T from the same summed bits with
//     the same kernels, so ranks on identical GPUs end identical (the
//     DDP's checksum check holds); the host codec's fixed-rounding kernels
//     are not reproduced — the two agree to float rounding, not bit for
//     bit, and ranks on different GPU models are not promised the same
//     bits.
//   * without warm start (the ablation) each step's fresh Q is drawn on
//     the host from the host codec's seed and copied over: the host waits
//     for that copy, once per compressed matrix and step.
// The state has the host codec's names and shapes (powersgd_plan.h), on
// the CPU: a checkpoint of either resumes on the other.
//
// Threading: as DeviceCodec. Internal to src/ddp.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "device_codec.h"
#include "powersgd_plan.h"

namespace bigbatch::ddp_detail {

class DevicePowerSgdCodec : public DeviceCodec {
 public:
  // Refuses what the host codec refuses, in its words.
  DevicePowerSgdCodec(const PowerSgdOptions& options, DataType wireType,
                      const std::vector<torch::Tensor>& params,
                      const std::vector<std::string>& names, int worldSize, torch::Device device);

  DataType wireType() const override { return wireType_; }
  void exchange(size_t index, const Bucket& bucket, const torch::Tensor& values,
                DeviceWireSum& wire) override;
  int64_t wireBytes(const Bucket& bucket) const override;
  NamedState state() const override;
  void loadState(const NamedState& state) override;
  void rescale(double factor) override;

  int rankOf(size_t param) const { return plan_[param].rank; }
  int64_t steps() const { return steps_; }

 private:
  struct Matrix {
    torch::Tensor q;      // cols x rank, the warm start
    torch::Tensor first;  // cols x rank, Q's first draw (a Q that collapsed starts over)
    torch::Tensor error;  // rows x cols, this rank's error memory (allocated on first use)
  };

  // The uncompressed values of `bucket` summed in one collective.
  void sumUncompressed(const Bucket& bucket, const torch::Tensor& values, DeviceWireSum& wire);
  // Q's columns at unit length, from its first draw where one collapsed.
  void unitColumns(size_t param);
  // The state's tensors, allocated on the stream that was current at
  // construction or loadState (the compute stream), marked used on the
  // exchange's stream: a block freed when exchange() replaces one (Q
  // every step) then waits for the exchange stream's queued kernels that
  // still read it, instead of going at once to the compute stream's next
  // allocation (the caching allocator's rule; device_feed.h has the same).
  // Once after each of those; the tensors exchange() makes are its own.
  void adoptStateOnCurrentStream();

  PowerSgdOptions options_;
  DataType wireType_;
  int worldSize_;
  torch::Device device_;
  std::vector<std::string> names_;
  std::vector<LowRankShape> plan_;  // per parameter, registration order
  std::vector<Matrix> matrices_;    // the same
  int64_t steps_ = 0;               // synced steps exchanged so far
  bool adopted_ = false;            // adoptStateOnCurrentStream done since the last load
  torch::Tensor p_, qSum_;          // the bucket's factors, packed (fp32)
  torch::Tensor scratch_;           // the 16-bit wire
};

}  // namespace bigbatch::ddp_detail
