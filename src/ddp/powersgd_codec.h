// PowerSgdCodec: gradients compressed to rank-r factors on the wire
// (Vogels, Karimireddy & Jaggi, "PowerSGD: Practical Low-Rank Gradient
// Compression for Distributed Optimization", NeurIPS 2019 — the scheme of
// PyTorch's powerSGD_hook), with error feedback and warm-started Q.
//
// Per bucket, once `startStep` synced steps have gone by uncompressed:
//   * each parameter's gradient is viewed as a matrix M, n = its first
//     dimension, m = the rest (a conv: out x in*kh*kw); it is compressed
//     when its factors pay — (n + m) r * minCompressionRate <= n m, with r
//     = min(rank, n, m) (powersgd_plan.h) — and the rest (vectors, small
//     matrices) are summed uncompressed in one batched collective, exactly
//     as the plain codec of the wire type would;
//   * with error feedback, X = M + E (E: what compression left out of this
//     rank's last gradient), formed in E's own memory — E is X until the
//     step's end — in the same pass as P = X Q (low_rank_kernels.h: each
//     of the three steps over the gradient is one pass over memory);
//   * Q's columns scaled to unit length (the same on every rank; it changes
//     nothing P's orthogonalisation keeps, and bounds P by the gradient);
//   * P = X Q, one collective for every P of the bucket, each P
//     orthogonalised (modified Gram-Schmidt in double, low_rank_kernels.h:
//     the same bits on every rank);
//   * Q = X^T P, one collective for every Q; M ~ P Q^T, E = X - P Q^T / N.
//
// The wire type (ddp.exchange_dtype) is that of every collective here:
// fp32, or fp16/bf16 — the factors and the uncompressed values cast to 16
// bits, pre-divided by the world size as the 16-bit codec does (half the
// bytes again; Vogels et al. send fp32, PyTorch's fp16_compress_wrapper
// around its powerSGD_hook is the 16-bit analogue). The rounding of the
// factors is compression error like any other: P Q^T is computed from the
// summed, rounded factors on every rank, and error feedback carries what
// it left out.
//
// A step whose summed P or Q is not finite (an overflowed fp16 backward
// under loss scaling, or the 16-bit wire's range exceeded) leaves NaN in
// the compressed gradients of every rank — the loss scaler skips the
// step — and resets the error memory instead of folding non-finite
// values into every later step; Q keeps the last finite step's. When the
// loss scale changes (x2 after its growth interval of clean steps, / 2 on
// an overflow) the trainer rescales the error memory with it (rescale()):
// the memory is always at the scale of the gradients it is added to.
// The factors are always of the summed gradient (also where the codec
// leaves the mean, BucketResult::kMean, which divides only what it writes
// to the bucket): P Q^T = P P^T (sum_j M_j), the sum projected on P's
// span; rank i keeps E_i = M_i - (P Q^T) / N, so the ranks' errors add up
// to the sum's compression error. Every rank computes
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
#include <utility>
#include <vector>

#include "gradient_codec.h"
#include "powersgd_plan.h"

namespace bigbatch::ddp_detail {

class PowerSgdCodec : public GradientCodec {
 public:
  // Throws InvalidArgument naming ddp.powersgd_rank when it is below 1 or
  // compresses none of these parameters.
  // `wireType`: kFloat32, kFloat16 or kBFloat16 (see above).
  PowerSgdCodec(const PowerSgdOptions& options, DataType wireType,
                const std::vector<torch::Tensor>& params, const std::vector<std::string>& names,
                int worldSize, BucketResult result = BucketResult::kSum);

  DataType wireType() const override { return wireType_; }
  void exchange(size_t index, const Bucket& bucket, float* data, WireSum& wire) override;
  // Once compression has started: the factors and the uncompressed values.
  int64_t wireBytes(const Bucket& bucket) const override;
  NamedState state() const override;
  void loadState(const NamedState& state) override;
  void rescale(double factor) override;

  // The factors' rank of parameter `param`; 0 when it goes uncompressed.
  int rankOf(size_t param) const { return plan_[param].rank; }
  int64_t steps() const { return steps_; }

 private:
  // A compressed gradient's state.
  struct Matrix {
    torch::Tensor q;      // cols x rank, the warm start
    torch::Tensor error;  // rows x cols, this rank's error memory (allocated on first use)
  };

  torch::Tensor freshQ(size_t param) const;
  // Q with its columns at unit length; a Q with a zero or non-finite
  // column (nothing came back last step) drawn afresh first.
  void unitColumns(size_t param);
  // The floats at `segments_` summed across the ranks as one message of
  // the wire type, written back in place: their sum, or their mean.
  void sumSegments(WireSum& wire, BucketResult result);
  // Sums the uncompressed entries of `bucket` in one collective.
  void sumUncompressed(const Bucket& bucket, float* data, WireSum& wire);
  // The non-finite step (see above): NaN in every compressed gradient of
  // the bucket, the error memory reset.
  void passNonFinite(const Bucket& bucket, float* data);

  PowerSgdOptions options_;
  DataType wireType_;
  int worldSize_;
  BucketResult result_;  // of the gradients (the factors are always summed)
  std::vector<std::string> names_;
  std::vector<LowRankShape> plan_;                   // per parameter, registration order
  std::vector<Matrix> matrices_;                     // the same
  int64_t steps_ = 0;                                // synced steps exchanged so far
  int64_t nonFiniteSteps_ = 0;                       // steps passNonFinite() handled
  std::vector<std::pair<float*, size_t>> segments_;  // what sumSegments() sends
  std::vector<uint8_t> wire_;                        // the packed message
  std::vector<double> work_;                         // orthogonalisation, Q's sums
  std::vector<float> qt_;                            // Q^T of the matrix at hand
  torch::Tensor p_, qSum_;                           // the bucket's factors, packed
};

}  // namespace bigbatch::ddp_detail
