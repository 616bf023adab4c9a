// PowerSgdCodec: gradients compressed to rank-r factors on the wire
// (Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank Gradient
// Compression for Distributed Optimization", NeurIPS 2019 — the scheme of
// PyTorch's powerSGD_hook), with error feedback and warm-started Q.
//
// Per bucket, once `startStep` synced steps have gone by uncompressed:
//   * each parameter's gradient is viewed as a matrix M, n = its first
//     dimension, m = the rest (a conv: out x in*kh*kw); it is compressed
//     when its factors pay — (n + m) r * minCompressionRate <= n m, with r
//     = min(rank, n, m) — and the rest (vectors, small matrices) are summed
//     uncompressed in one batched collective, exactly as fp32;
//   * with error feedback, M += E (what compression left out of this rank's
//     last gradient);
//   * P = M Q, one collective for every P of the bucket, each P
//     orthogonalised (modified Gram-Schmidt in double, in plain loops: the
//     same bits on every rank);
//   * Q = M^T P, one collective for every Q; M ~ P Q^T.
// Gradients are sums here, not means (DistributedDataParallel), so the
// factors are of the summed gradient: P Q^T = P P^T (sum_j M_j), the sum
// projected on P's span; rank i keeps E_i = M_i - (P Q^T) / N, so the
// ranks' errors add up to the sum's compression error. Every rank computes
// the same P, Q and P Q^T from the same summed bits: the gradients stay
// identical without a broadcast.
//
// Q is drawn once per parameter from a fixed seed (the same on every
// rank) and then warm-started from the last step's summed Q; without warm
// start a fresh Q is drawn every step from a seed of the step.
//
// State (a checkpoint's, state()/loadState()): the step count, every
// compressed parameter's Q, and this rank's error memory — the size of the
// compressed gradients.
//
// Threading: as GradientCodec (exchange() on one thread at a time);
// state() and loadState() while no exchange is in flight. Internal to
// src/ddp.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gradient_codec.h"

namespace bigbatch::ddp_detail {

class PowerSgdCodec : public GradientCodec {
 public:
  // Throws InvalidArgument naming ddp.powersgd_rank when it is below 1 or
  // compresses none of these parameters.
  PowerSgdCodec(const PowerSgdOptions& options, const std::vector<torch::Tensor>& params,
                const std::vector<std::string>& names, int worldSize);

  DataType wireType() const override { return DataType::kFloat32; }
  void exchange(size_t index, const Bucket& bucket, float* data, WireSum& wire) override;
  // Once compression has started: the factors and the uncompressed values.
  int64_t wireBytes(const Bucket& bucket) const override;
  NamedState state() const override;
  void loadState(const NamedState& state) override;

  // The factors' rank of parameter `param`; 0 when it goes uncompressed.
  int rankOf(size_t param) const { return matrices_[param].rank; }
  int64_t steps() const { return steps_; }

 private:
  struct Matrix {
    int64_t rows = 0, cols = 0;
    int rank = 0;         // 0: not compressed
    torch::Tensor q;      // cols x rank, the warm start
    torch::Tensor error;  // rows x cols, this rank's error memory (allocated on first use)
  };

  torch::Tensor freshQ(size_t param) const;
  // Sums the uncompressed entries of `bucket` in one collective.
  void sumUncompressed(const Bucket& bucket, float* data, WireSum& wire);

  PowerSgdOptions options_;
  int worldSize_;
  std::vector<std::string> names_;
  std::vector<Matrix> matrices_;  // per parameter, registration order
  int64_t steps_ = 0;             // synced steps exchanged so far
  std::vector<float> flat_;       // the uncompressed entries, packed
  std::vector<double> work_;      // orthogonalisation in double
  torch::Tensor p_, qSum_;        // the bucket's factors, packed
};

}  // namespace bigbatch::ddp_detail
