// DistributedDataParallel: the gradient exchange of data-parallel training.
//
// Every rank builds the same model from the same seed (no weight broadcast;
// verifyIdentical() checks it with one small collective). The gradients live
// in flat fp32 buckets (bucket_layout.h): each parameter's .grad() is a view
// into its bucket, so backward accumulates straight into the buffers that
// are exchanged. A post-hook on every parameter's gradient accumulator marks
// it ready; when a whole bucket is ready — and every bucket before it, so all
// ranks reduce the same buckets in the same order — it is handed to the
// communication thread and summed across ranks while backward continues
// (Goyal et al. 2017; Li et al., "PyTorch Distributed", VLDB 2020).
// finishBackward() launches what is left (unused parameters) and waits; the
// time it waits is the exposed communication.
//
// Gradients are SUMMED, not averaged: make each rank's loss the sum over its
// samples divided by the global batch (samples of all ranks and accumulation
// steps), so uneven shards and accumulation stay exact.
//
// Partitioned optimizer state (DdpOptions::partition; ZeRO stage 1,
// Rajbhandari et al. 2020): each bucket is reduce-SCATTERED instead of
// allreduced (ring: the first half of a ring allreduce, S·(n-1)/n bytes
// sent per rank), so rank c ends with the summed gradient of its chunk c of
// every bucket (collectives.h's chunking) and updates only that slice of
// the weights; gatherWeights() then all-gathers every bucket's updated
// weights (the other half, the same bytes). For that the parameters are
// re-pointed (set_data) into flat per-bucket weight buffers, so the
// optimizer's slices and the all-gather touch the model's own storage and
// nothing is copied. The gathers run on the communication thread while the
// compute thread goes on to the next step's data; waitWeights() (called at
// the start of the next step, and before anything reads the weights) waits
// for them. Same wire bytes as the allreduce (with a 16-bit exchange type
// the gradients go in 16 bits, the weights in fp32); 1/N of the optimizer's
// memory traffic and state.
//
// A model on a GPU (or DdpOptions::stageThroughHost) partitions through the
// host mirrors of the staged exchange (device_staging.h), as ZeRO-Offload
// does (Ren et al. 2021): the reduce-scattered gradients stay in the pinned
// host mirror, this rank's chunk of the weights is copied up beside them
// (S/N bytes), the slices — and the optimizer, its state and its update —
// live in host memory, and gatherWeights() all-gathers the host mirrors and
// copies each bucket back to the device. The GPU holds no optimizer state.
//
// Threading: one compute thread calls every method. The Communicator is used
// by the internal communication thread, and by the compute thread only in
// finishBackward() after that thread went idle (the last bucket is reduced
// inline: nothing is left to overlap it with) — never by both at once, as
// MPI_THREAD_SERIALIZED requires. A failing run's error notice goes out the
// same way (postError()). On the NCCL path (DdpOptions::nccl: a model on
// GPUs, one per rank) no host thread moves gradients: the thread that runs
// backward enqueues each bucket's allreduce on NCCL's stream, in bucket
// order on every rank as NCCL requires, and finishBackward() waits for
// them under the deadline (src/ddp/nccl_exchange.h).
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
#include "bigbatch/ddp/comm_thread.h"
#include "bigbatch/ddp/stall_watchdog.h"

namespace bigbatch {

class NcclCommunicator;

namespace ddp_detail {
class DeviceStaging;
class NcclExchange;
}

struct DdpOptions {
  // Gradient bytes per bucket; 0: "auto" — fusion autotuning (below).
  size_t fusionBytes = size_t{1} << 20;
  // Fusion autotuning (Horovod's autotune is the reference; Sergeev & Del
  // Balso 2018): the candidates — 16 KiB, 64 KiB, ... x4, up to the first
  // that puts every gradient in one bucket (at most 64 MiB) — each run
  // `tuneSteps` synced steps (after one untimed step that follows the
  // re-layout); a step's time is
  // from its synced beginBackward() to the end of finishBackward() — the
  // forward, the backward and the exchange it did not hide. Every rank then
  // takes the candidate whose slowest rank's median was least (one small
  // max-allreduce: all ranks choose the same) and keeps it for the run.
  // Not under partition (its optimizer holds slices of the first layout):
  // there "auto" is 1 MiB.
  int tuneSteps = 5;
  std::string allreduce = "auto";        // algorithm name (allreduce.h)
  std::string allreduceTable;            // "auto" rules for both topologies; empty: default table
  bool tune = true;                      // "auto" times its candidates online (allreduce_selector.h)
  bool overlap = true;                   // exchange buckets during backward (false: after it)
  // Type on the wire: kFloat32, or kFloat16 / kBFloat16 for half the bytes.
  // 16-bit exchange pre-divides each bucket by the world size before the
  // sum (so fp16 cannot overflow however many ranks add up), the collective
  // accumulates in fp32, and the result is multiplied back into the fp32
  // bucket (Micikevicius et al. 2018; the 2048-GPU records sent fp16).
  DataType exchangeType = DataType::kFloat32;
  // Called after each bucket's exchange (for timelines), on the thread that
  // ran it; `onComputeThread` is true for the bucket reduced inline.
  std::function<void(size_t bucket, size_t bytes, std::chrono::steady_clock::time_point start,
                     std::chrono::steady_clock::time_point end, bool onComputeThread)>
      onExchange;
  // Partitioned optimizer state (see above); ignored on one rank.
  bool partition = false;
  // Marks every exchange so a stall (a peer that stopped answering inside a
  // call without a deadline) is caught; null: no watchdog.
  StallWatchdog* watchdog = nullptr;
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
  DistributedDataParallel(torch::nn::Module& model, Communicator& comm, DdpOptions options);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::vector<Bucket>& buckets() const { return layout_; }
  // The bucket cap in use: the configured one, or under autotuning the
  // candidate being timed and then the one chosen.
  size_t fusionBytes() const { return fusion_; }
  // Under autotuning: whether the choice is made (always true otherwise).
  bool fusionSettled() const { return candidates_.empty() || tuned_; }
  // The exchanged parameters (requires_grad), in registration order.
  const std::vector<std::string>& parameterNames() const { return names_; }

  // Partitioned (DdpOptions::partition on more than one rank): this rank's
  // slices, in bucket order; empty otherwise.
  bool partitioned() const { return partitioned_; }
  const std::vector<ParameterShard>& shards() const { return shards_; }
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

  // Zeroes every bucket (the gradients are views into them).
  void zeroGrad();
  // Call before each backward: `sync` = false for the accumulation
  // micro-batches before the last, whose gradients only accumulate locally.
  void beginBackward(bool sync);
  // After the synced backward: launches buckets not yet launched, waits for
  // all, returns the seconds waited (the exposed communication).
  double finishBackward();

  // Sums `values` across ranks (through the communication thread).
  std::vector<double> allreduceSum(std::vector<double> values);
  // Element-wise max / min across ranks.
  std::vector<double> allreduceMax(std::vector<double> values);
  std::vector<double> allreduceMin(std::vector<double> values);
  // Rank 0 receives every rank's string (index = rank); others get {}.
  std::vector<std::string> gatherToRoot(const std::string& mine);
  // Replaces the floating-point buffers (BatchNorm running statistics) by
  // their mean across ranks, or by rank `root`'s.
  void averageBuffers();
  void broadcastBuffers(int root);

  // The exchange's online tuning — the allreduce's on this communicator
  // (AutoAllreduce::tuningState; comm.allreduce = auto with tuning) and the
  // fusion autotuning's choice ("fusion_tuning.bytes", once made) — for a
  // checkpoint, and its restore on a resume with the same world size.
  std::map<std::string, double> allreduceTuning() const;
  void restoreAllreduceTuning(const std::map<std::string, double>& state);

  // Tells every other rank that this one failed (Communicator::postError),
  // from the communication thread once the exchanges queued before it have
  // finished or failed: the compute thread never enters the Communicator
  // while that thread may be inside it. Best effort; never throws.
  void postError(const std::string& message);

  // Called by the gradient hooks (autograd thread = compute thread on CPU).
  void markReady(size_t param);

 private:
  void makeShards();
  // (Re)builds the buckets for `fusionBytes` and points every gradient into them.
  void layoutFor(size_t fusionBytes);
  // Under autotuning, after a synced step: records its time, moves on to
  // the next candidate or makes the choice.
  void tuneFusion(double seconds);
  void launchReadyBuckets();
  void launch(size_t bucket);
  void runWatched(const char* operation, const std::function<void()>& task);
  // The floating-point buffers flattened into one fp32 tensor, `fn` applied
  // to it on the communication thread, and the result written back.
  void exchangeBuffers(const char* operation, const std::function<void(torch::Tensor&)>& fn);
  // On whichever thread holds the communicator.
  void reduceBucket(size_t bucket, bool onComputeThread);

  torch::nn::Module& model_;
  Communicator& comm_;
  DdpOptions options_;
  int rank_, size_;
  std::vector<torch::Tensor> params_;   // registration order, requires_grad only
  std::vector<std::string> names_;
  std::vector<Bucket> layout_;
  std::vector<torch::Tensor> buffers_;  // one flat fp32 tensor per bucket
  bool staged_ = false;                 // buckets reduced through host mirrors
  std::unique_ptr<ddp_detail::DeviceStaging> staging_;
  std::unique_ptr<ddp_detail::DeviceStaging> weightStaging_;  // staged and partitioned
  bool onNccl_ = false;                 // buckets summed by NCCL on the device
  std::unique_ptr<ddp_detail::NcclExchange> nccl_;
  bool partitioned_ = false;
  std::vector<torch::Tensor> weights_;  // partitioned: the flat weight buckets
  std::vector<ParameterShard> shards_;
  uint64_t gatherTicket_ = 0;               // partitioned: the last gather in flight (0: none)
  size_t fusion_ = 0;                       // the bucket cap in use
  std::vector<size_t> candidates_;          // autotuning: the caps to time (empty: none)
  std::vector<std::vector<double>> candidateTimes_;
  size_t candidate_ = 0;
  int untimed_ = 0;  // steps to skip after a re-layout
  bool tuned_ = false;
  size_t relayoutTo_ = 0;  // applied at the next zeroGrad() (0: none)
  std::chrono::steady_clock::time_point syncStart_;
  std::vector<std::vector<uint8_t>> wire_;  // per bucket: its 16-bit copy on the wire
  std::vector<size_t> bucketOf_;        // param -> bucket
  std::vector<torch::Tensor> views_;    // param -> its gradient view
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hookKeys_;
  std::vector<char> ready_;
  std::vector<int64_t> pending_;        // per bucket: params not yet ready
  size_t nextLaunch_ = 0;
  bool sync_ = false;
  std::unique_ptr<Allreduce> allreduce_;
  std::unique_ptr<Allreduce> scalarAllreduce_;  // small metric vectors
  std::unique_ptr<CommThread> thread_;
};

}  // namespace bigbatch
