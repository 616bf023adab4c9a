// ProcessGroupBigbatch: the torch.distributed backend "bigbatch" — PyTorch
// scripts, DDP and its comm hooks on bigbatch's communicator and
// collectives (tensor_collectives.h) instead of gloo's. A c10d
// ProcessGroup in PyTorch 1.13, a c10d Backend in 2.x (torch_api.h).
//
// Set-up, in this order: the communicator (MPI's world: ranks and size from
// the MPI launch; the group's must agree), its timeout, the allreduce
// ("auto": bigbatch's size and topology table with online tuning and the
// shared-memory phase on a host; BIGBATCH_ALLREDUCE names another), the
// heartbeat (every rank's progress in shared memory, mirrored across hosts:
// a peer that stopped is named in the error), the communication thread.
//
// Each collective is checked on the caller's thread (CPU tensors of a
// supported type: a CUDA tensor is refused, naming "nccl" — or in PyTorch
// 2.x the per-device form "cpu:bigbatch,cuda:nccl" — as the fix), queued,
// and run on the one communication thread in an order that is the same on
// every rank (collective_scheduler.h: also for collectives issued from
// future callbacks; DDP's buckets overlap its backward); its Work
// completes there and its future on a CompletionPool thread. A failure (a peer gone past the timeout, a
// mismatched call) fails that Work and every later one with its message:
// the group is broken and the job must restart, as with gloo.
//
// Codecs (the comm hooks' work, codec_registry.h) run on the same thread.
// Sends and receives are posted there in issue order, not run to their end
// (point_to_point.h), and the monitored barrier keeps its own deadline.
//
// Files: the group's life and its queue here; its collectives in
// process_group_collectives.cpp; sends, receives and the monitored barrier
// in process_group_p2p.cpp.
//
// Threading: every public member from any thread; the communicator, the
// allreduce and the codecs are touched only on the communication thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/comm/communicator.h"
#include "bigbatch/ddp/heartbeat.h"
#include "bigbatch/ddp/stall_watchdog.h"
#include "bigbatch_work.h"
#include "codec_registry.h"
#include "collective_scheduler.h"
#include "completion_pool.h"
#include "point_to_point.h"
#include "tensor_collectives.h"
#include "torch_api.h"

namespace bigbatch::torch_backend {

struct BackendOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  std::string allreduce = "auto";  // allreduce.h's names
  bool heartbeat = true;           // off: no shared-memory table (tests of many groups)
};

class ProcessGroupBigbatch : public BackendBase {
 public:
  // Over `comm` (owned), whose rank and size must be `rank` and `size`.
  // Collective: every rank of the group constructs it.
  ProcessGroupBigbatch(std::unique_ptr<Communicator> comm, int rank, int size,
                       BackendOptions options);
  ~ProcessGroupBigbatch() override;

  const std::string getBackendName() const override { return "bigbatch"; }

  c10::intrusive_ptr<::c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const ::c10d::AllreduceOptions& opts = ::c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<::c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const ::c10d::BroadcastOptions& opts = ::c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<::c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts = ::c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<::c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const ::c10d::AllgatherOptions& opts = ::c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const ::c10d::ReduceScatterOptions& opts = ::c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const ::c10d::ReduceScatterOptions& opts = ::c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<::c10d::Work> barrier(
      const ::c10d::BarrierOptions& opts = ::c10d::BarrierOptions()) override;
  c10::intrusive_ptr<::c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const ::c10d::ReduceOptions& opts = ::c10d::ReduceOptions()) override;
  c10::intrusive_ptr<::c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::GatherOptions& opts = ::c10d::GatherOptions()) override;
  c10::intrusive_ptr<::c10d::Work> scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const ::c10d::ScatterOptions& opts = ::c10d::ScatterOptions()) override;
  c10::intrusive_ptr<::c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::AllToAllOptions& opts = ::c10d::AllToAllOptions()) override;
  // Split along dim 0 by the sizes given (empty: n equal parts).
  c10::intrusive_ptr<::c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const ::c10d::AllToAllOptions& opts = ::c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const ::c10d::AllreduceCoalescedOptions& opts =
          ::c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts = ::c10d::AllgatherOptions()) override;
  // Point to point (point_to_point.h): posted in issue order on the
  // communication thread, completed as their transport reports them done.
  // Tags 0 .. 32766.
  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                        int tag) override;
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                                 int tag) override;
  // Rank 0 waits up to opts.timeout (unset: the group's) for every other
  // rank to arrive, then releases them; past it, raises naming the first
  // rank missing (`waitAllRanks`: every one), as gloo's does. Not through
  // the call check: a rank that never comes is what it is for.
  void monitoredBarrier(const ::c10d::BarrierOptions& opts, bool waitAllRanks = false) override;
#if TORCH_VERSION_MAJOR >= 2
  // PyTorch 2.x's coalesced tensor forms (all_gather_into_tensor and
  // reduce_scatter_tensor inside _coalescing_manager; FSDP2 in places):
  // every pair through one collective of the inputs packed together, of
  // one type. all_gather_single_coalesced and
  // reduce_scatter_single_coalesced (2.15's names) forward to these.
  c10::intrusive_ptr<::c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts = ::c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<::c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const ::c10d::ReduceScatterOptions& opts = ::c10d::ReduceScatterOptions()) override;
#endif
  // The collectives issued on this group from this process (every call,
  // counted on the caller's thread as gloo's sequence number is): equal
  // on every rank that made the same calls.
  void setSequenceNumberForGroup() override { issued_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return issued_.load(); }

  // A comm hook's bucket through codec `codec` (registered with
  // codecs().add): the bucket's mean over the ranks, in place, as DDP
  // expects a hook's future to hold it.
  c10::intrusive_ptr<::c10d::Work> compressedAllreduce(at::Tensor& buffer, int codec,
                                                       int64_t bucketIndex,
                                                       std::vector<BucketSlot> slots);
  CodecRegistry& codecs() { return codecs_; }
  // Runs `fn` on the communication thread and waits (state of the codecs).
  void runOnCommThread(const std::function<void()>& fn);

  // The allreduce's name and the communicator's description, for the user.
  std::string describe() const;
  // Groups of this process not yet destroyed or shut down.
  static int liveGroups();
  // Group objects of this process not yet destroyed (a group shut down but
  // still referenced holds its MPI communicator until it goes).
  static int aliveGroups();
  // The first failure of any group of this process ("": none). Its peers
  // may be gone: the process must end the job (MPI_Abort), not finalize MPI.
  static std::string processFailure();
  // Makes `what` the process's failure (the first is kept) though no group
  // broke: a group that could not be made, whose members may be left
  // waiting.
  static void recordProcessFailure(const std::string& what);
  // Called around a blocking join in the destructor (the Python module
  // releases the GIL there: a future's callback may be waiting for it).
  static void setJoinGuard(std::function<void(const std::function<void()>&)> guard);
  // At the interpreter's exit, while Python still runs (bigbatch_torch
  // registers it with atexit; the caller releases the GIL): every live
  // group finishes what is queued and runs its futures' callbacks, then
  // stops its threads. A script that keeps DDP or a hook's state in a
  // global keeps its group alive to the process's end, past
  // destroy_process_group(): without this a completion thread would enter
  // a finalizing interpreter (which ends the thread: std::terminate), and
  // the heartbeat's pulse would write shared memory the exit's teardown
  // (MPI_Finalize) unmaps. A collective called afterwards raises.
  static void shutdownAll();
  // PyTorch 2.7+'s destroy_process_group calls it (c10d::Backend::shutdown;
  // 1.13 and 2.1-2.6 have none): the group finishes what is queued and
  // stops, as when its last reference goes — 2.x keeps references past
  // destroy_process_group. A collective afterwards raises. Also from inside
  // one of the group's own future callbacks.
#if BIGBATCH_TORCH_HAS_BACKEND_SHUTDOWN
  void shutdown() override;
#else
  void shutdown();
#endif

 private:
  using Body = std::function<void()>;
  c10::intrusive_ptr<::c10d::Work> enqueue(::c10d::OpType type, const char* title,
                                           std::vector<at::Tensor> outputs, CallSignature call,
                                           Body body);
  void run(const c10::intrusive_ptr<BigbatchWork>& work, const CallSignature& call,
           const Body& body, int64_t family);
  // wait() returns; the future's callbacks run on a completion thread, in
  // the scheduler's family `family`.
  void complete(const c10::intrusive_ptr<BigbatchWork>& work, std::exception_ptr error,
                int64_t family);
  std::exception_ptr explain(std::exception_ptr error, const CallSignature& call);
  // The group is broken by `what` (the first failure is kept): later calls
  // fail with it, the process's failure is set, the peers are told, and
  // the sends and receives in flight fail. On the communication thread.
  void recordFailure(const std::string& what);
  c10::intrusive_ptr<::c10d::Work> pointToPoint(bool isSend, std::vector<at::Tensor>& tensors,
                                                int peer, int tag);
  // The monitored barrier's body: rank 0 gathers arrivals under `timeout`.
  void runMonitoredBarrier(std::chrono::milliseconds timeout, bool waitAllRanks);
  // Finishes and stops the threads (the destructor's work, without freeing
  // the group); idempotent.
  void quiesce();
  // Where this thread runs one of this group's callbacks and ends the group.
  void endCallbacksRunningHere();

  BackendOptions options_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Allreduce> algorithm_;
  std::unique_ptr<Heartbeat> heartbeat_;
  std::unique_ptr<StallWatchdog> pulse_;  // pulses the heartbeat from its own thread
  CodecRegistry codecs_;
  // On the communication thread; null where the transport cannot poll
  // (Gloo's): send and recv are refused there, naming the fix.
  std::unique_ptr<PointToPoint> p2p_;
  // How long the group's end (shutdown or destruction) waits for sends and
  // receives in flight.
  static constexpr std::chrono::seconds kPointToPointGrace{2};
  std::atomic<bool> shuttingDown_{false};  // set in quiesce(), before the last polls
  // Stopped in this order: the scheduler (it may hand completions to the
  // pool), then the pool (its callbacks report to the scheduler... which
  // by then only counts).
  std::unique_ptr<CompletionPool> completions_;
  std::unique_ptr<CollectiveScheduler> scheduler_;
  std::mutex quiesceMutex_;  // quiesce() from shutdownAll, shutdown and the destructor
  bool quiesced_ = false;    // guarded by quiesceMutex_
  std::atomic<int64_t> sequence_{0};  // collectives run (the heartbeat's count)
  std::atomic<uint64_t> issued_{0};   // collectives issued
  std::mutex brokenMutex_;
  std::string brokenBy_;  // guarded by brokenMutex_: the first failure's message
};

// Checks done on the caller's thread: a CPU tensor, dense, of a type the
// collectives carry; names the fix otherwise.
void checkCpuTensor(const at::Tensor& t, const char* op);

}  // namespace bigbatch::torch_backend
