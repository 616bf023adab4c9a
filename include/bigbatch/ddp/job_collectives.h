// JobCollectives: the small job-wide operations of a training run — metric
// sums, maxima and minima, the BatchNorm statistics' average or broadcast,
// the initial-weights checksum, strings gathered to rank 0, and the notice
// of a failing rank — beside the gradient exchange, not part of it.
//
// They share the exchange's one communication thread (CommThread, which this
// object owns and lends to DistributedDataParallel): MPI is initialised
// MPI_THREAD_SERIALIZED, so every call into the Communicator after start-up
// goes through that thread, in the same order on every rank. Each operation
// is marked for the stall watchdog under its own name, so a peer that stops
// inside one is named with it.
//
// Sums use recursive doubling — the same order of additions on every rank,
// so every rank gets bit-identical results and they decide together (when
// to stop, whether to skip a step). The BatchNorm statistics use it too, not
// the tuned gradient algorithm: their sum must not depend on a choice made
// by timing, or a resume on 3+ ranks could not reproduce the bits.
//
// Threading: one owner thread (the compute thread) calls every method; the
// operations run on the communication thread and the caller waits for them.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/comm/communicator.h"
#include "bigbatch/ddp/comm_thread.h"
#include "bigbatch/ddp/stall_watchdog.h"

namespace bigbatch {

// FNV-1a over a tensor's bytes in logical (contiguous) order, read on the
// CPU; 63 bits (never negative).
int64_t tensorChecksum(const torch::Tensor& t);

class JobCollectives {
 public:
  // `watchdog`: marks every operation so a stall is caught (null: none).
  explicit JobCollectives(Communicator& comm, StallWatchdog* watchdog = nullptr);
  ~JobCollectives();  // waits for what the thread still runs
  JobCollectives(const JobCollectives&) = delete;
  JobCollectives& operator=(const JobCollectives&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Communicator& communicator() { return comm_; }
  StallWatchdog* watchdog() const { return watchdog_; }
  // The communication thread, for the gradient exchange's tasks.
  CommThread& thread() { return *thread_; }

  // Runs `task` on the communication thread, marked as `operation` for the
  // watchdog, and waits for it.
  void runWatched(const char* operation, const std::function<void()>& task);

  // Element-wise sum / max / min of `values` across ranks.
  std::vector<double> allreduceSum(std::vector<double> values);
  std::vector<double> allreduceMax(std::vector<double> values);
  std::vector<double> allreduceMin(std::vector<double> values);
  // The max of `*value` across ranks, started on the communication thread
  // and not waited for (marked as `operation` for the watchdog): every rank
  // starts it at the same point of its sequence of collectives; finishMax
  // waits for it, and `*value` holds the result then. The shared value
  // outlives a caller that never waits (a failing run).
  uint64_t startMax(std::shared_ptr<int64_t> value, const char* operation);
  void finishMax(uint64_t ticket);
  // Rank 0 receives every rank's string (index = rank); others get {}.
  std::vector<std::string> gatherToRoot(const std::string& mine);
  // Replaces `model`'s floating-point buffers (BatchNorm running
  // statistics) by their mean across ranks, or by rank `root`'s — all but
  // those named in `frozen` (frozen parameters held as buffers: the same on
  // every rank, and (a + a + a) / 3 need not be a in floating point).
  void averageBuffers(torch::nn::Module& model, const std::vector<std::string>& frozen = {});
  void broadcastBuffers(torch::nn::Module& model, int root,
                        const std::vector<std::string>& frozen = {});
  // Compares `checksums[i]` (of the tensor named `names[i]`) across ranks;
  // throws MismatchError naming the first that differs, or a different
  // count. For the initial weights: no weights are broadcast.
  void verifyIdentical(const std::vector<std::string>& names, const std::vector<int64_t>& checksums);
  // Tells every other rank that this one failed (Communicator::postError),
  // from the communication thread once the work queued before it has
  // finished or failed: the compute thread never enters the Communicator
  // while that thread may be inside it. Best effort; never throws.
  void postError(const std::string& message);

 private:
  // `model`'s floating-point buffers flattened into one fp32 host tensor,
  // `fn` applied to it on the communication thread, the result written back.
  void exchangeBuffers(torch::nn::Module& model, const char* operation,
                       const std::vector<std::string>& frozen,
                       const std::function<void(torch::Tensor&)>& fn);

  Communicator& comm_;
  StallWatchdog* watchdog_;
  int rank_, size_;
  std::unique_ptr<Allreduce> sum_;  // recursive doubling (see above)
  std::unique_ptr<CommThread> thread_;
};

}  // namespace bigbatch
