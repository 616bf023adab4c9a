// DistributedDataParallel: the gradient exchange of data-parallel training,
// assembled from its parts (src/ddp/):
//   GradientBuckets      the gradients as views into flat fp32 buckets, and
//                        which buckets backward has completed, in order;
//   BucketReducer        the transport that moves a complete bucket while
//                        backward goes on — the host communication thread,
//                        the same through pinned host mirrors of device
//                        buckets, or NCCL on a GPU stream;
//   GradientCodec        what a bucket looks like on the wire — fp32,
//                        fp16/bf16, PowerSGD (encode -> collective ->
//                        decode); DeviceCodec the same on a GPU stream,
//                        for the NCCL transport;
//   PartitionedExchange  ZeRO-1: reduce-scatter, this rank's slices, the
//                        weight all-gather;
//   FusionTuner          ddp.fusion_bytes = auto.
// The small job-wide operations (metric sums, BatchNorm statistics,
// checksums, the error notice) are JobCollectives', which owns the one
// communication thread this exchange borrows.
//
// Every rank builds the same model from the same seed (no weight broadcast;
// verifyIdentical() checks it with one small collective). A post-hook on
// every parameter's gradient accumulator marks it ready; when a whole bucket
// is ready — and every bucket before it, so all ranks reduce the same
// buckets in the same order — it is handed to the reducer and summed across
// ranks while backward continues (Goyal et al. 2017; Li et al., "PyTorch
// Distributed", VLDB 2020). finishBackward() exchanges what is left (the
// last bucket, unused parameters) and waits; the time it waits is the
// exposed communication.
//
// Gradients are SUMMED, not averaged: make each rank's loss the sum over its
// samples divided by the global batch (samples of all ranks and accumulation
// steps), so uneven shards and accumulation stay exact.
//
// Partitioned optimizer state (DdpOptions::partition; ZeRO stage 1,
// Rajbhandari et al. 2020): rank c ends with the summed gradient of its
// chunk c of every bucket and updates only that slice of the weights;
// gatherWeights() then all-gathers every bucket's updated weights while the
// compute thread goes on, and waitWeights() (called at the start of the
// next step, and before anything reads the weights) waits for them. A model
// on a GPU partitions through the host mirrors, as ZeRO-Offload does
// (src/ddp/partitioned_exchange.h).
//
// Threading: one compute thread calls every method. The Communicator is used
// by the communication thread, and by the compute thread only in
// finishBackward() after that thread went idle (the last bucket is reduced
// inline: nothing is left to overlap it with) — never by both at once, as
// MPI_THREAD_SERIALIZED requires. On the NCCL path (DdpOptions::nccl: a
// model on GPUs, one per rank) no host thread moves gradients: the thread
// that runs backward enqueues each bucket's allreduce on NCCL's stream, in
// bucket order on every rank as NCCL requires, and finishBackward() waits
// for them under the deadline (src/ddp/nccl_exchange.h).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/comm/communicator.h"
#include "bigbatch/ddp/bucket_layout.h"
#include "bigbatch/ddp/job_collectives.h"

namespace bigbatch {

class NcclCommunicator;

namespace ddp_detail {
class BucketCodec;
class BucketReducer;
class DeviceCodec;
class DeviceStaging;
class FusionTuner;
class GradientBuckets;
class GradientCodec;
class PartitionedExchange;
class WireSum;
}  // namespace ddp_detail

// PowerSGD gradient compression (Vogels, Karimireddy & Jaggi, NeurIPS 2019;
// src/ddp/powersgd_codec.h, on the NCCL path
// src/ddp/device_powersgd_codec.h): each large enough gradient matrix M (a conv's
// out x in*kh*kw) travels as two rank-r factors — P = M Q summed, then
// orthogonalised, Q = M^T P summed — and is rebuilt as P Q^T; vectors and
// small matrices go uncompressed in one batched sum.
struct PowerSgdOptions {
  int rank = 4;
  // Synced steps exchanged uncompressed before compression starts (e.g.
  // the warmup's: early gradients change fast).
  int64_t startStep = 0;
  // What compression leaves out of a rank's gradient is added to its next
  // one (error feedback); off for the ablation.
  bool errorFeedback = true;
  // Q starts each step from the last step's (warm start; one power
  // iteration a step suffices); off: fresh random Q every step.
  bool warmStart = true;
  // A matrix is compressed only when its two factors are at most
  // 1/minCompressionRate of it: (n + m) r * rate <= n m.
  double minCompressionRate = 2;
};

enum class GradientCompression { kNone, kPowerSgd };

struct DdpOptions {
  // Gradient bytes per bucket; 0: "auto" — fusion autotuning (below).
  size_t fusionBytes = size_t{1} << 20;
  // Fusion autotuning (src/ddp/fusion_tuner.h): each candidate cap is timed
  // over `tuneSteps` synced steps and the fastest kept for the run. Not
  // under partition (its optimizer holds slices of the first layout):
  // there "auto" is 1 MiB.
  int tuneSteps = 5;
  std::string allreduce = "auto";        // algorithm name (allreduce.h)
  std::string allreduceTable;            // "auto" rules for both topologies; empty: default table
  bool tune = true;                      // "auto" times its candidates online (allreduce_selector.h)
  bool overlap = true;                   // exchange buckets during backward (false: after it)
  // Type on the wire: kFloat32, or kFloat16 / kBFloat16 for half the bytes
  // (the codec: src/ddp/half_codec.h — pre-divided by the world size so the
  // sum cannot overflow, added in 16 bits by the collective, multiplied back
  // into the fp32 bucket).
  DataType exchangeType = DataType::kFloat32;
  // Gradient compression (ddp.compression): none, or PowerSGD with
  // `powerSgd`, its factors in `exchangeType`; on the host collectives or,
  // with `nccl`, on the GPU; not with `partition` (the factors are
  // whole-matrix, a rank's reduce-scatter slice is not).
  GradientCompression compression = GradientCompression::kNone;
  PowerSgdOptions powerSgd;
  // Called after each bucket's exchange (for timelines), on the thread that
  // ran it; `onComputeThread` is true for the bucket reduced inline.
  std::function<void(size_t bucket, size_t bytes, std::chrono::steady_clock::time_point start,
                     std::chrono::steady_clock::time_point end, bool onComputeThread)>
      onExchange;
  // Partitioned optimizer state (see above); ignored on one rank.
  bool partition = false;
  // Reduce each bucket through a host mirror (src/ddp/device_staging.h):
  // always so when the model is on a GPU (the host collectives read host
  // memory); on CPU only to test that path.
  bool stageThroughHost = false;
  // Sum the buckets on the GPU with NCCL (src/ddp/nccl_exchange.h) instead
  // of the host collectives: the job's NCCL communicator and the torch
  // stream it runs on (the one whose native handle is nccl->stream()). The
  // model must be on that stream's GPU; not with `partition`. The timeline
  // then has no per-bucket allreduce slices (they run on the device; the
  // host's wait for them is the step's comm_wait). Null: host collectives.
  NcclCommunicator* nccl = nullptr;
  std::optional<c10::Stream> ncclStream;
};

// This rank's slice of one parameter under DdpOptions::partition: elements
// [begin, begin + numel) of the parameter in memory order.
struct ParameterShard {
  size_t param;  // index into parameterNames()
  std::string name;
  int64_t fullDim;  // the whole parameter's rank
  int64_t begin;
  int64_t numel;
  torch::Tensor weight;     // 1-D view into the parameter's storage (staged: its host mirror)
  torch::Tensor grad;       // 1-D view into its reduce-scattered gradient (staged: host mirror)
  torch::Tensor parameter;  // the whole parameter (its shape and strides)
};

class DistributedDataParallel {
 public:
  // `job`: the job's collectives, whose communication thread (and stall
  // watchdog) the exchange uses; it must outlive the exchange.
  DistributedDataParallel(torch::nn::Module& model, JobCollectives& job, DdpOptions options);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The job's collectives this exchange runs beside (its communication thread).
  JobCollectives& collectives() const { return job_; }
  const std::vector<Bucket>& buckets() const;
  // The bucket cap in use: the configured one, or under autotuning the
  // candidate being timed and then the one chosen.
  size_t fusionBytes() const;
  // Under autotuning: whether the choice is made (always true otherwise).
  bool fusionSettled() const;
  // The exchanged parameters (requires_grad), in registration order.
  const std::vector<std::string>& parameterNames() const;

  // Partitioned (DdpOptions::partition on more than one rank): this rank's
  // slices, in bucket order; empty otherwise.
  bool partitioned() const { return partition_ != nullptr; }
  const std::vector<ParameterShard>& shards() const;
  // After the optimizer updated this rank's slices: all-gathers every
  // bucket's weights on the communication thread (first layers first).
  void gatherWeights();
  // Waits for gatherWeights(); returns the seconds waited. No-op when none.
  double waitWeights();
  // Collective: whole parameter-shaped tensors (one per parameterNames()
  // entry) from every rank's slices, `mine[i]` being shards()[i]'s values.
  // For checkpoints of partitioned optimizer state.
  std::vector<torch::Tensor> gatherShards(const std::vector<torch::Tensor>& mine);

  // Compares a checksum of every parameter and buffer (and the bucket layout)
  // across ranks; throws MismatchError naming the first tensor that differs.
  void verifyIdentical();

  // Zeroes every bucket (the gradients are views into them). On one rank
  // on a GPU, where nothing is exchanged, the gradients are no views:
  // every gradient is set to none, and backward's AccumulateGrad keeps the
  // tensor it made (the same values; a parameter that took no part in the
  // backward then has no gradient, and the optimizer leaves it alone).
  void zeroGrad();
  // Call before each backward: `sync` = false for the accumulation
  // micro-batches before the last, whose gradients only accumulate locally.
  void beginBackward(bool sync);
  // After the synced backward: exchanges buckets not yet handed over, waits
  // for all, returns the seconds waited (the exposed communication).
  double finishBackward();

  // Bytes each rank hands to the collectives per synced step: the buckets
  // in the wire type, or under compression its factors and uncompressed
  // tensors (once compression has started; 0 on one rank).
  int64_t wireBytesPerStep() const;
  // The same gradient's bytes in fp32: wireBytesPerStep()'s compression
  // ratio is this over that.
  int64_t fp32BytesPerStep() const;

  // This rank's state of the codec — under PowerSGD its error memory (its
  // own), the warm-started Q matrices and its step count (the same on every
  // rank) — for a checkpoint, and its restore on a resume with the same
  // world size. Empty without compression.
  using NamedState = std::vector<std::pair<std::string, torch::Tensor>>;
  NamedState codecState() const;
  void loadCodecState(const NamedState& state);
  // The loss scale changed by `factor` (new / old): the codec's memory of
  // past gradients follows it (GradientCodec::rescale). Between steps.
  void rescaleCodecState(double factor);

  // The exchange's online tuning — the allreduce's on this communicator
  // (AutoAllreduce::tuningState; comm.allreduce = auto with tuning) and the
  // fusion autotuning's choice ("fusion_tuning.bytes", once made) — for a
  // checkpoint, and its restore on a resume with the same world size.
  std::map<std::string, double> allreduceTuning() const;
  // The allreduce choices online tuning settled, one line per size class
  // ("1048576..2097151 B: shm (its best call 210.3 us; ring 250.0 us)").
  std::vector<std::string> allreduceChoices() const;
  void restoreAllreduceTuning(const std::map<std::string, double>& state);

  // Called by the gradient hooks (autograd thread = compute thread on CPU).
  void markReady(size_t param);

 private:
  // (Re)builds the buckets for `fusionBytes` and their host mirrors where
  // they need them, then — `partition`, at set-up only — the partition of
  // them, and the transport.
  void layoutFor(size_t fusionBytes, bool partition);
  // The transport for the current layout (see the header's list).
  std::unique_ptr<ddp_detail::BucketReducer> makeReducer();
  // The codec in use: the host one, or on the NCCL path the device one.
  const ddp_detail::BucketCodec& codec() const;
  ddp_detail::BucketCodec& codec();

  torch::nn::Module& model_;
  JobCollectives& job_;
  DdpOptions options_;
  int rank_, size_;
  bool onDevice_ = false;  // the model's parameters are not in host memory
  bool bindGradients_ = true;  // the gradients are views into the buckets (gradient_buckets.h)
  std::unique_ptr<Allreduce> allreduce_;  // comm.allreduce, for the gradients
  std::unique_ptr<ddp_detail::GradientBuckets> buckets_;
  std::unique_ptr<ddp_detail::GradientCodec> codec_;  // the host transports' (else null)
  std::unique_ptr<ddp_detail::DeviceCodec> deviceCodec_;  // the NCCL path's (else null)
  std::unique_ptr<ddp_detail::WireSum> wire_;
  std::unique_ptr<ddp_detail::DeviceStaging> staging_;  // host mirrors (staged transports)
  std::unique_ptr<ddp_detail::PartitionedExchange> partition_;
  std::unique_ptr<ddp_detail::BucketReducer> reducer_;
  std::unique_ptr<ddp_detail::FusionTuner> tuner_;  // ddp.fusion_bytes = auto
  size_t relayoutTo_ = 0;                           // applied at the next zeroGrad() (0: none)
  std::chrono::steady_clock::time_point syncStart_;
  bool sync_ = false;
};

}  // namespace bigbatch
