#include "process_group_bigbatch.h"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <set>
#include <thread>

#include "bigbatch/comm/world.h"
#include "bigbatch/common/error.h"
#include "wire_sums.h"

namespace bigbatch::torch_backend {
namespace {

std::atomic<int> live{0};
std::mutex failureMutex;
std::string failure;  // guarded by failureMutex

// The groups alive, for shutdownAll(). Never freed: read at exit.
std::mutex groupsMutex;
std::set<ProcessGroupBigbatch*>* groups = new std::set<ProcessGroupBigbatch*>;

// On a completion thread, while it runs a future's callbacks: whose, and
// whether the group was destroyed inside them (its destructor sets it).
struct RunningCallbacks {
  const ProcessGroupBigbatch* group = nullptr;
  int64_t family = -1;
  bool groupEnded = false;
};
thread_local RunningCallbacks runningCallbacks;

std::function<void(const std::function<void()>&)>& joinGuard() {
  static std::function<void(const std::function<void()>&)> guard;
  return guard;
}

ReduceKind reduceKindOf(const ::c10d::ReduceOp& op, const char* collective) {
  switch (static_cast<::c10d::ReduceOp::RedOpType>(op)) {
    case ::c10d::ReduceOp::SUM: return ReduceKind::kSum;
    case ::c10d::ReduceOp::AVG: return ReduceKind::kAvg;
    case ::c10d::ReduceOp::MAX: return ReduceKind::kMax;
    case ::c10d::ReduceOp::MIN: return ReduceKind::kMin;
    case ::c10d::ReduceOp::PRODUCT: return ReduceKind::kProduct;
    default:
      BIGBATCH_THROW(InvalidArgument,
                     "{} with ReduceOp {}: the bigbatch backend reduces with SUM, AVG, MAX, MIN "
                     "and PRODUCT; use one of those (or backend \"gloo\" for bitwise ops)",
                     collective, static_cast<int>(static_cast<::c10d::ReduceOp::RedOpType>(op)));
  }
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* op) {
  BIGBATCH_REQUIRE(tensors.size() == 1, InvalidArgument,
                   "{} of {} tensors in one call: the bigbatch backend takes one tensor per call "
                   "(one per process); pass a list of one",
                   op, tensors.size());
  return tensors[0];
}

}  // namespace

void checkCpuTensor(const at::Tensor& t, const char* op) {
  BIGBATCH_REQUIRE(t.defined(), InvalidArgument, "{} of an undefined tensor", op);
  BIGBATCH_REQUIRE(!t.is_cuda(), InvalidArgument,
                   "{} of a CUDA tensor ({}): the bigbatch backend sums CPU tensors (MPI and "
                   "shared memory between processes); for CUDA tensors use backend \"nccl\" — in "
                   "PyTorch 2.x both at once: init_process_group(\"cpu:bigbatch,cuda:nccl\")",
                   op, t.device().str());
  BIGBATCH_REQUIRE(t.device().is_cpu() && t.layout() == at::kStrided, InvalidArgument,
                   "{} of a {} tensor on {}: the bigbatch backend takes dense CPU tensors", op,
                   c10::toString(t.layout()), t.device().str());
  switch (t.scalar_type()) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16:
    case at::kLong: case at::kInt: case at::kShort: case at::kChar: case at::kByte:
    case at::kBool:
      return;
    default:
      BIGBATCH_THROW(InvalidArgument,
                     "{} of a {} tensor: the bigbatch backend carries float32, float64, float16, "
                     "bfloat16, int64, int32, int16, int8, uint8 and bool; convert it (.to(...))",
                     op, c10::toString(t.scalar_type()));
  }
}

ProcessGroupBigbatch::ProcessGroupBigbatch(std::unique_ptr<Communicator> comm, int rank, int size,
                                           BackendOptions options)
    : BackendBase(rank, size), options_(std::move(options)), comm_(std::move(comm)) {
  BIGBATCH_REQUIRE(comm_->rank() == rank && comm_->size() == size, InvalidArgument,
                   "the process group is rank {} of {}, but MPI started this process as rank {} "
                   "of {}: start the script with mpirun -np N and let bigbatch_torch set RANK "
                   "and WORLD_SIZE (or set them to MPI's)",
                   rank, size, comm_->rank(), comm_->size());
  comm_->setTimeoutMs(options_.timeout.count());
  AllreduceOptions ao;
  ao.checkSignature = false;  // checkSameCall names each rank's call first
  // Every collective with a deadline: a stopped peer raises a TimeoutError
  // naming it in Python, which MPI_Allreduce (no deadline) could not.
  ao.tuneWithMpi = false;
  algorithm_ = makeAllreduce(options_.allreduce, ao);
  if (options_.heartbeat) {
    heartbeat_ = std::make_unique<Heartbeat>(*comm_);
    Heartbeat* hb = heartbeat_.get();
    // The heartbeat's pulse, and the backstop for a call that has no
    // deadline of its own (every collective here has one and fails first,
    // past the timeout): name the stalled peer and end the job.
    const auto limit = options_.timeout + std::max<std::chrono::milliseconds>(
                                              options_.timeout / 4, std::chrono::seconds(5));
    pulse_ = std::make_unique<StallWatchdog>(
        limit,
        [this, hb](const std::string& operation, double seconds) {
          std::fprintf(stderr,
                       "bigbatch_torch: error: [rank %d] stall watchdog: %s has not finished "
                       "after %.1f s; %s; ending every rank of the job\n",
                       comm_->rank(), operation.c_str(), seconds,
                       hb->describeLaggards(sequence_.load(), Heartbeat::kExchange).c_str());
          endJob(1);
        },
        [hb] { hb->pulse(); });
  }
  comm_->barrier();  // every rank is here: the group exists
  if (comm_->pollsRequests()) {
    // Collective, like the barrier: every rank's transport says the same.
    p2p_ = std::make_unique<PointToPoint>(comm_->split(0, comm_->rank()));
  }
  completions_ = std::make_unique<CompletionPool>();
  scheduler_ = std::make_unique<CollectiveScheduler>();
  if (p2p_) scheduler_->setIdlePoll([this] { return p2p_->poll(); });
  ++live;
  {
    const std::lock_guard<std::mutex> lock(groupsMutex);
    groups->insert(this);
  }
  // Every rank reached the barrier: an earlier group's failure (its group
  // destroyed since) no longer means a peer is gone.
  const std::lock_guard<std::mutex> lock(failureMutex);
  failure.clear();
}

int ProcessGroupBigbatch::liveGroups() { return live.load(); }

std::string ProcessGroupBigbatch::processFailure() {
  const std::lock_guard<std::mutex> lock(failureMutex);
  return failure;
}

void ProcessGroupBigbatch::quiesce() {
  const std::lock_guard<std::mutex> lock(quiesceMutex_);  // shutdownAll and the destructor
  scheduler_->stop();    // runs what is queued (the thread still uses scheduler_)
  // Sends and receives nobody waited for end with the group (the thread
  // has stopped: this thread may touch them now).
  if (p2p_) p2p_->failAll("the bigbatch process group was shut down before it completed");
  completions_.reset();  // runs the callbacks handed over
  pulse_.reset();
}

void ProcessGroupBigbatch::shutdownAll() {
  // Each live group held by a reference of its own while it stops, taken
  // under the lock with an atomic increment-if-not-zero (a weak pointer's
  // lock): a group whose count already reached 0 is in its destructor
  // (waiting for the lock to leave the set), which stops it itself. The
  // lock is not held while the groups stop: their callbacks may take it.
  std::vector<c10::intrusive_ptr<ProcessGroupBigbatch>> alive;
  {
    const std::lock_guard<std::mutex> lock(groupsMutex);
    for (ProcessGroupBigbatch* group : *groups) {
      if (ProcessGroupBigbatch* held = c10::raw::weak_intrusive_ptr::lock(group)) {
        alive.push_back(c10::intrusive_ptr<ProcessGroupBigbatch>::reclaim(held));
      }
    }
  }
  for (const auto& group : alive) group->quiesce();
}

ProcessGroupBigbatch::~ProcessGroupBigbatch() {
  {
    const std::lock_guard<std::mutex> lock(groupsMutex);
    groups->erase(this);
  }
  // The script dropped its last reference inside one of this group's
  // future callbacks: this runs on the completion thread running it. The
  // scheduler stops once every family's callbacks have ended, this one's
  // included, which cannot end while its thread is here: end it now (the
  // thread's task then leaves the gone scheduler alone), and the pool,
  // destroyed on its own thread, detaches that thread instead of joining it.
  if (runningCallbacks.group == this) {
    runningCallbacks.groupEnded = true;
    runningCallbacks.group = nullptr;  // a group made later at this address is another
    scheduler_->callbacksEnded(runningCallbacks.family);
  }
  // The communication thread finishes what was queued; a future's callback
  // on the completion pool may need what the caller holds (Python's GIL).
  auto stop = [this] {
    quiesce();
    scheduler_.reset();
  };
  if (joinGuard()) {
    joinGuard()(stop);
  } else {
    stop();
  }
  --live;
}

void ProcessGroupBigbatch::setJoinGuard(std::function<void(const std::function<void()>&)> guard) {
  joinGuard() = std::move(guard);
}

std::string ProcessGroupBigbatch::describe() const {
  return fmt::format("bigbatch backend: rank {} of {} ({}, {} rank(s) on this host), allreduce "
                     "{}, timeout {} s",
                     comm_->rank(), comm_->size(), comm_->transportName(), comm_->localSize(),
                     algorithm_->name(), options_.timeout.count() / 1000.0);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::enqueue(::c10d::OpType type,
                                                              const char* title,
                                                              std::vector<at::Tensor> outputs,
                                                              CallSignature call, Body body) {
  auto work = c10::make_intrusive<BigbatchWork>(getRank(), type, title, std::move(outputs));
  ++issued_;
  scheduler_->submit([this, work, call, body = std::move(body)](int64_t family) {
    run(work, call, body, family);
  });
  return work;
}

void ProcessGroupBigbatch::complete(const c10::intrusive_ptr<BigbatchWork>& work,
                                    std::exception_ptr error, int64_t family) {
  work->finishRun(error);
  scheduler_->completionQueued(family);
  CollectiveScheduler* scheduler = scheduler_.get();
  const ProcessGroupBigbatch* group = this;
  completions_->submit([work, error, family, scheduler, group] {
    const RunningCallbacks outer = runningCallbacks;
    runningCallbacks = {group, family, false};
    scheduler->callbacksStarted(family);
    work->completeFuture(error);
    const bool groupEnded = runningCallbacks.groupEnded;
    runningCallbacks = outer;
    if (groupEnded) return;  // the destructor ended this family; the scheduler is gone
    scheduler->callbacksEnded(family);
  });
}

void ProcessGroupBigbatch::run(const c10::intrusive_ptr<BigbatchWork>& work,
                               const CallSignature& call, const Body& body, int64_t family) {
  const int64_t seq = ++sequence_;
  {
    const std::lock_guard<std::mutex> lock(brokenMutex_);
    if (!brokenBy_.empty()) {
      complete(work,
               std::make_exception_ptr(Error(fmt::format(
                   "[rank {}] the bigbatch process group failed earlier and cannot run {}: {}",
                   comm_->rank(), describeCall(call), brokenBy_))),
               family);
      return;
    }
  }
  try {
    if (heartbeat_) heartbeat_->beat(seq, Heartbeat::kExchange);
    const std::string what = describeCall(call);
    const StallWatchdog::Scope watched(pulse_.get(), StallWatchdog::kCommThread, what.c_str());
    // The monitored barrier is there to find a rank that never comes: no
    // call check (an allgather that would wait for it first).
    if (call.kind != CollectiveKind::kMonitoredBarrier) checkSameCall(*comm_, call);
    body();
    if (heartbeat_) heartbeat_->beat(seq, Heartbeat::kCompute);
    complete(work, nullptr, family);
  } catch (const std::exception&) {
    std::exception_ptr error = explain(std::current_exception(), call);
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& explained) {
      recordFailure(explained.what());
    }
    complete(work, error, family);
  }
}

void ProcessGroupBigbatch::recordFailure(const std::string& what) {
  std::string first;
  {
    const std::lock_guard<std::mutex> lock(brokenMutex_);
    if (!brokenBy_.empty()) return;
    brokenBy_ = what;
    first = brokenBy_;
    const std::lock_guard<std::mutex> process(failureMutex);
    if (failure.empty()) failure = brokenBy_;
  }
  // The peers' waits end at once instead of at their deadline.
  comm_->postError(first);
  if (p2p_) {
    p2p_->failAll(fmt::format("[rank {}] the bigbatch process group failed: {}", comm_->rank(),
                              first));
  }
}

std::exception_ptr ProcessGroupBigbatch::explain(std::exception_ptr error,
                                                 const CallSignature& call) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    std::string why = e.what();
    if (heartbeat_) {
      why += "; " + heartbeat_->describeLaggards(sequence_.load(), Heartbeat::kExchange);
    }
    return std::make_exception_ptr(
        TimeoutError(fmt::format("{} (in {})", why, describeCall(call))));
  } catch (...) {
    return std::current_exception();
  }
}

void ProcessGroupBigbatch::runOnCommThread(const std::function<void()>& fn) {
  std::promise<void> done;
  scheduler_->submit(
      [&](int64_t) {
        try {
          fn();
          done.set_value();
        } catch (...) {
          done.set_exception(std::current_exception());
        }
      },
      /*collective=*/false);
  done.get_future().get();
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::allreduce(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceOptions& opts) {
  at::Tensor t = single(tensors, "allreduce");
  checkCpuTensor(t, "allreduce");
  const ReduceKind kind = reduceKindOf(opts.reduceOp, "allreduce");
  checkReducible(t, kind);
  const CallSignature call{CollectiveKind::kAllreduce, static_cast<int64_t>(kind), t.numel(),
                           static_cast<int64_t>(t.scalar_type())};
  return enqueue(::c10d::OpType::ALLREDUCE, "bigbatch:all_reduce", {t}, call,
                 [this, t, kind]() mutable { allreduceTensor(*comm_, *algorithm_, t, kind); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::broadcast(
    std::vector<at::Tensor>& tensors, const ::c10d::BroadcastOptions& opts) {
  at::Tensor t = single(tensors, "broadcast");
  checkCpuTensor(t, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  BIGBATCH_REQUIRE(root >= 0 && root < getSize(), InvalidArgument,
                   "broadcast from rank {}: the group has ranks 0..{}", root, getSize() - 1);
  const CallSignature call{CollectiveKind::kBroadcast, root, t.numel(),
                           static_cast<int64_t>(t.scalar_type())};
  return enqueue(::c10d::OpType::BROADCAST, "bigbatch:broadcast", {t}, call,
                 [this, t, root]() mutable { broadcastTensor(*comm_, t, root); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions&) {
  const at::Tensor input = single(inputs, "allgather");
  checkCpuTensor(input, "allgather");
  BIGBATCH_REQUIRE(outputs.size() == 1, InvalidArgument,
                   "allgather into {} output lists: the bigbatch backend takes one list (of one "
                   "tensor per rank)",
                   outputs.size());
  std::vector<at::Tensor> out = outputs[0];
  for (const at::Tensor& o : out) checkCpuTensor(o, "allgather");
  checkAllgatherOutputs(input, out, getSize());
  const CallSignature call{CollectiveKind::kAllgather, static_cast<int64_t>(out.size()),
                           input.numel(), static_cast<int64_t>(input.scalar_type())};
  return enqueue(::c10d::OpType::ALLGATHER, "bigbatch:all_gather", out, call,
                 [this, input, out]() mutable { allgatherTensor(*comm_, input, out); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::_allgather_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::AllgatherOptions&) {
  checkCpuTensor(input, "all_gather_into_tensor");
  checkCpuTensor(output, "all_gather_into_tensor");
  BIGBATCH_REQUIRE(output.numel() == input.numel() * getSize() &&
                       output.scalar_type() == input.scalar_type() && output.is_contiguous(),
                   InvalidArgument,
                   "all_gather_into_tensor: the output must be contiguous, of the input's type, "
                   "with {} x {} elements (ranks x input); it has {}",
                   getSize(), input.numel(), output.numel());
  std::vector<at::Tensor> rows = output.view({getSize(), -1}).unbind(0);
  const CallSignature call{CollectiveKind::kAllgather, getSize(), input.numel(),
                           static_cast<int64_t>(input.scalar_type())};
  at::Tensor in = input;
  return enqueue(::c10d::OpType::_ALLGATHER_BASE, "bigbatch:_allgather_base", {output}, call,
                 [this, in, rows]() mutable { allgatherTensor(*comm_, in, rows); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  at::Tensor output = single(outputs, "reduce_scatter");
  checkCpuTensor(output, "reduce_scatter");
  BIGBATCH_REQUIRE(inputs.size() == 1, InvalidArgument,
                   "reduce_scatter of {} input lists: the bigbatch backend takes one list (of one "
                   "tensor per rank)",
                   inputs.size());
  std::vector<at::Tensor> in = inputs[0];
  for (const at::Tensor& t : in) checkCpuTensor(t, "reduce_scatter");
  checkReduceScatterInputs(in, output, getSize());
  const ReduceKind kind = reduceKindOf(opts.reduceOp, "reduce_scatter");
  checkReducible(output, kind);
  const CallSignature call{CollectiveKind::kReduceScatter, static_cast<int64_t>(kind),
                           output.numel(), static_cast<int64_t>(output.scalar_type())};
  return enqueue(::c10d::OpType::REDUCE_SCATTER, "bigbatch:reduce_scatter", {output}, call,
                 [this, in, output, kind]() mutable {
                   reduceScatterTensor(*comm_, in, output, kind);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) {
  checkCpuTensor(input, "reduce_scatter_tensor");
  checkCpuTensor(output, "reduce_scatter_tensor");
  BIGBATCH_REQUIRE(input.numel() == output.numel() * getSize() &&
                       output.scalar_type() == input.scalar_type(),
                   InvalidArgument,
                   "reduce_scatter_tensor: the input must hold {} x {} elements (ranks x "
                   "output) of the output's type; it has {}",
                   getSize(), output.numel(), input.numel());
  std::vector<at::Tensor> in = input.contiguous().view({getSize(), -1}).unbind(0);
  const ReduceKind kind = reduceKindOf(opts.reduceOp, "reduce_scatter_tensor");
  checkReducible(output, kind);
  const CallSignature call{CollectiveKind::kReduceScatter, static_cast<int64_t>(kind),
                           output.numel(), static_cast<int64_t>(output.scalar_type())};
  at::Tensor out = output;
  return enqueue(::c10d::OpType::_REDUCE_SCATTER_BASE, "bigbatch:_reduce_scatter_base", {output},
                 call, [this, in, out, kind]() mutable {
                   reduceScatterTensor(*comm_, in, out, kind);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::barrier(const ::c10d::BarrierOptions&) {
  const CallSignature call{CollectiveKind::kBarrier, 0, 0, -1};
  return enqueue(::c10d::OpType::BARRIER, "bigbatch:barrier", {}, call,
                 [this] { comm_->barrier(); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::reduce(std::vector<at::Tensor>& tensors,
                                                              const ::c10d::ReduceOptions& opts) {
  at::Tensor t = single(tensors, "reduce");
  checkCpuTensor(t, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  BIGBATCH_REQUIRE(root >= 0 && root < getSize(), InvalidArgument,
                   "reduce to rank {}: the group has ranks 0..{}", root, getSize() - 1);
  const ReduceKind kind = reduceKindOf(opts.reduceOp, "reduce");
  checkReducible(t, kind);
  const CallSignature call{CollectiveKind::kReduce, static_cast<int64_t>(kind) + 8 * root,
                           t.numel(), static_cast<int64_t>(t.scalar_type())};
  return enqueue(::c10d::OpType::REDUCE, "bigbatch:reduce", {t}, call,
                 [this, t, kind, root]() mutable {
                   reduceTensor(*comm_, *algorithm_, t, kind, root);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::GatherOptions& opts) {
  const at::Tensor input = single(inputs, "gather");
  checkCpuTensor(input, "gather");
  const int root = static_cast<int>(opts.rootRank);
  BIGBATCH_REQUIRE(root >= 0 && root < getSize(), InvalidArgument,
                   "gather to rank {}: the group has ranks 0..{}", root, getSize() - 1);
  BIGBATCH_REQUIRE(outputs.size() <= 1, InvalidArgument,
                   "gather into {} output lists: the bigbatch backend takes one list (of one "
                   "tensor per rank) on the root",
                   outputs.size());
  std::vector<at::Tensor> out = outputs.empty() ? std::vector<at::Tensor>{} : outputs[0];
  for (const at::Tensor& o : out) checkCpuTensor(o, "gather");
  checkRootedList(out, input, getSize(), getRank() == root, "gather");
  const CallSignature call{CollectiveKind::kGather, root, input.numel(),
                           static_cast<int64_t>(input.scalar_type())};
  return enqueue(::c10d::OpType::GATHER, "bigbatch:gather", out, call,
                 [this, input, out, root]() mutable { gatherTensor(*comm_, input, out, root); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ScatterOptions& opts) {
  at::Tensor output = single(outputs, "scatter");
  checkCpuTensor(output, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  BIGBATCH_REQUIRE(root >= 0 && root < getSize(), InvalidArgument,
                   "scatter from rank {}: the group has ranks 0..{}", root, getSize() - 1);
  BIGBATCH_REQUIRE(inputs.size() <= 1, InvalidArgument,
                   "scatter of {} input lists: the bigbatch backend takes one list (of one "
                   "tensor per rank) on the root",
                   inputs.size());
  std::vector<at::Tensor> in = inputs.empty() ? std::vector<at::Tensor>{} : inputs[0];
  for (const at::Tensor& t : in) checkCpuTensor(t, "scatter");
  checkRootedList(in, output, getSize(), getRank() == root, "scatter");
  const CallSignature call{CollectiveKind::kScatter, root, output.numel(),
                           static_cast<int64_t>(output.scalar_type())};
  return enqueue(::c10d::OpType::SCATTER, "bigbatch:scatter", {output}, call,
                 [this, in, output, root]() mutable { scatterTensor(*comm_, in, output, root); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllToAllOptions&) {
  for (const at::Tensor& t : outputs) checkCpuTensor(t, "all_to_all");
  for (const at::Tensor& t : inputs) checkCpuTensor(t, "all_to_all");
  checkAllToAllLists(outputs, inputs, getSize());
  const CallSignature call{CollectiveKind::kAllToAll, 0, 0,
                           static_cast<int64_t>(inputs[0].scalar_type())};
  std::vector<at::Tensor> out = outputs, in = inputs;
  return enqueue(::c10d::OpType::ALLTOALL, "bigbatch:all_to_all", out, call,
                 [this, out, in]() mutable { allToAllTensor(*comm_, out, in); });
}

namespace {

// `t`'s rows split by `sizes` (empty: `parts` equal parts), as views.
std::vector<at::Tensor> splitRows(const at::Tensor& t, const std::vector<int64_t>& sizes,
                                  int parts, const char* side) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  std::vector<at::Tensor> out;
  if (sizes.empty()) {
    BIGBATCH_REQUIRE(rows % parts == 0, InvalidArgument,
                     "all_to_all_single: the {} has {} row(s), not a multiple of the {} rank(s); "
                     "pass {}_split_sizes",
                     side, rows, parts, side);
    for (int r = 0; r < parts; ++r) out.push_back(t.narrow(0, r * (rows / parts), rows / parts));
    return out;
  }
  BIGBATCH_REQUIRE(static_cast<int>(sizes.size()) == parts, InvalidArgument,
                   "all_to_all_single: {} {} split size(s) on a group of {} rank(s): give one "
                   "per rank",
                   sizes.size(), side, parts);
  int64_t offset = 0;
  for (const int64_t n : sizes) {
    BIGBATCH_REQUIRE(n >= 0 && offset + n <= rows, InvalidArgument,
                     "all_to_all_single: the {} split sizes add up past its {} row(s)", side, rows);
    out.push_back(t.narrow(0, offset, n));
    offset += n;
  }
  BIGBATCH_REQUIRE(offset == rows, InvalidArgument,
                   "all_to_all_single: the {} split sizes add up to {} of its {} row(s)", side,
                   offset, rows);
  return out;
}

}  // namespace

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const ::c10d::AllToAllOptions&) {
  checkCpuTensor(input, "all_to_all_single");
  checkCpuTensor(output, "all_to_all_single");
  BIGBATCH_REQUIRE(input.dim() > 0 && output.dim() > 0, InvalidArgument,
                   "all_to_all_single of a 0-dimensional tensor: it splits dimension 0");
  std::vector<at::Tensor> out = splitRows(output, outputSplitSizes, getSize(), "output");
  std::vector<at::Tensor> in = splitRows(input, inputSplitSizes, getSize(), "input");
  checkAllToAllLists(out, in, getSize());
  const CallSignature call{CollectiveKind::kAllToAll, 0, 0,
                           static_cast<int64_t>(input.scalar_type())};
  return enqueue(::c10d::OpType::ALLTOALL_BASE, "bigbatch:all_to_all_single", {output}, call,
                 [this, out, in]() mutable { allToAllTensor(*comm_, out, in); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  for (const at::Tensor& t : tensors) checkCpuTensor(t, "all_reduce_coalesced");
  const ReduceKind kind = reduceKindOf(opts.reduceOp, "all_reduce_coalesced");
  at::Tensor packed = packTensors(tensors, "all_reduce_coalesced");
  checkReducible(packed, kind);
  const CallSignature call{CollectiveKind::kAllreduce, static_cast<int64_t>(kind), packed.numel(),
                           static_cast<int64_t>(packed.scalar_type())};
  std::vector<at::Tensor> ts = tensors;
  // Packed on the caller's thread, unpacked on the communication thread:
  // the script may change its tensors once the call returns, as with gloo.
  return enqueue(::c10d::OpType::ALLREDUCE_COALESCED, "bigbatch:allreduce_coalesced", ts, call,
                 [this, packed, ts, kind]() mutable {
                   allreduceTensor(*comm_, *algorithm_, packed, kind);
                   unpackTensors(packed, ts);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions&) {
  for (const at::Tensor& t : inputs) checkCpuTensor(t, "all_gather_coalesced");
  at::Tensor packed = packTensors(inputs, "all_gather_coalesced");
  BIGBATCH_REQUIRE(static_cast<int>(outputLists.size()) == getSize(), InvalidArgument,
                   "all_gather_coalesced into {} output list(s) on a group of {} rank(s): give "
                   "one list per rank",
                   outputLists.size(), getSize());
  std::vector<at::Tensor> flatOut;
  for (const auto& list : outputLists) {
    BIGBATCH_REQUIRE(list.size() == inputs.size(), InvalidArgument,
                     "all_gather_coalesced: an output list of {} tensor(s) for {} input(s); each "
                     "list must match the inputs",
                     list.size(), inputs.size());
    for (size_t i = 0; i < list.size(); ++i) {
      checkCpuTensor(list[i], "all_gather_coalesced");
      BIGBATCH_REQUIRE(list[i].numel() == inputs[i].numel() &&
                           list[i].scalar_type() == inputs[i].scalar_type(),
                       InvalidArgument,
                       "all_gather_coalesced: output {} holds {} {} element(s), its input {} {}",
                       i, list[i].numel(), c10::toString(list[i].scalar_type()),
                       inputs[i].numel(), c10::toString(inputs[i].scalar_type()));
      flatOut.push_back(list[i]);
    }
  }
  const CallSignature call{CollectiveKind::kAllgather, getSize(), packed.numel(),
                           static_cast<int64_t>(packed.scalar_type())};
  auto lists = outputLists;
  return enqueue(::c10d::OpType::ALLGATHER_COALESCED, "bigbatch:allgather_coalesced", flatOut,
                 call, [this, packed, lists]() mutable {
                   std::vector<at::Tensor> rows =
                       at::empty({getSize(), packed.numel()}, packed.options()).unbind(0);
                   allgatherTensor(*comm_, packed, rows);
                   for (size_t r = 0; r < lists.size(); ++r) unpackTensors(rows[r], lists[r]);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::pointToPoint(
    bool isSend, std::vector<at::Tensor>& tensors, int peer, int tag) {
  const char* op = isSend ? "send" : "recv";
  at::Tensor t = single(tensors, op);
  checkCpuTensor(t, op);
  BIGBATCH_REQUIRE(p2p_ != nullptr, InvalidArgument,
                   "{} over {}: its requests cannot be polled, which send and recv need; start "
                   "with mpirun, or under torchrun with BIGBATCH_TRANSPORT=ucx (the default)",
                   op, comm_->transportName());
  BIGBATCH_REQUIRE(peer == -1 || (peer >= 0 && peer < getSize() && peer != getRank()),
                   InvalidArgument, "{} {} rank {}: the group has ranks 0..{}, this one is {}", op,
                   isSend ? "to" : "from", peer, getSize() - 1, getRank());
  BIGBATCH_REQUIRE(tag >= 0 && tag <= PointToPoint::kMaxTag, InvalidArgument,
                   "{} with tag {}: the bigbatch backend carries tags 0..{}", op, tag,
                   PointToPoint::kMaxTag);
  auto work = c10::make_intrusive<BigbatchWork>(
      getRank(), isSend ? ::c10d::OpType::SEND
                        : (peer < 0 ? ::c10d::OpType::RECVANYSOURCE : ::c10d::OpType::RECV),
      isSend ? "bigbatch:send" : "bigbatch:recv", std::vector<at::Tensor>{t});
  scheduler_->submit(
      [this, work, t, isSend, peer, tag](int64_t) {
        // Completions outside any family: a callback's collectives start
        // their own, as a script's do.
        constexpr int64_t kNoFamily = -1;
        {
          const std::lock_guard<std::mutex> lock(brokenMutex_);
          if (!brokenBy_.empty()) {
            complete(work,
                     std::make_exception_ptr(Error(fmt::format(
                         "[rank {}] the bigbatch process group failed earlier and cannot run "
                         "a {}: {}",
                         comm_->rank(), isSend ? "send" : "recv", brokenBy_))),
                     kNoFamily);
            return;
          }
        }
        auto done = [this, work](std::exception_ptr error, int source) {
          if (error) {
            try {
              std::rethrow_exception(error);
            } catch (const std::exception& e) {
              recordFailure(e.what());
            }
          }
          work->setSourceRank(source);
          complete(work, error, kNoFamily);
        };
        if (isSend) {
          p2p_->postSend(t, peer, tag, done);
        } else {
          p2p_->postRecv(t, peer, tag, done);
        }
      },
      /*collective=*/false);
  return work;
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::send(std::vector<at::Tensor>& tensors,
                                                            int dstRank, int tag) {
  BIGBATCH_REQUIRE(dstRank >= 0, InvalidArgument, "send to rank {}: name a rank", dstRank);
  return pointToPoint(true, tensors, dstRank, tag);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::recv(std::vector<at::Tensor>& tensors,
                                                            int srcRank, int tag) {
  BIGBATCH_REQUIRE(srcRank >= 0, InvalidArgument, "recv from rank {}: name a rank", srcRank);
  return pointToPoint(false, tensors, srcRank, tag);
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  return pointToPoint(false, tensors, -1, tag);
}

void ProcessGroupBigbatch::monitoredBarrier(const ::c10d::BarrierOptions& opts,
                                            bool waitAllRanks) {
  const std::chrono::milliseconds timeout =
      opts.timeout == ::c10d::kUnsetTimeout ? options_.timeout : opts.timeout;
  const CallSignature call{CollectiveKind::kMonitoredBarrier, 0, 0, -1};
  auto work = enqueue(::c10d::OpType::BARRIER, "bigbatch:monitored_barrier", {}, call,
                      [this, timeout, waitAllRanks] { runMonitoredBarrier(timeout, waitAllRanks); });
  work->wait();
}

void ProcessGroupBigbatch::runMonitoredBarrier(std::chrono::milliseconds timeout,
                                               bool waitAllRanks) {
  constexpr int kArriveTag = 0x7e53, kReleaseTag = 0x7e54;
  const int n = comm_->size();
  uint8_t token = 1;
  if (n == 1) return;
  const int64_t saved = comm_->timeoutMs();
  struct Restore {
    Communicator& c;
    int64_t ms;
    ~Restore() { c.setTimeoutMs(ms); }
  } restore{*comm_, saved};
  comm_->setTimeoutMs(timeout.count());
  if (comm_->rank() != 0) {
    comm_->send(&token, 1, 0, kArriveTag);
    // Rank 0 may wait the whole timeout for the last rank, then release:
    // longer here, so that the release is not missed by a hair (a failure
    // on rank 0 reaches this wait as its error notice, at once).
    comm_->setTimeoutMs(2 * timeout.count() + 5000);
    comm_->recv(&token, 1, 0, kReleaseTag);
    return;
  }
  std::vector<uint8_t> tokens(static_cast<size_t>(n));
  std::vector<std::unique_ptr<Request>> arrivals(static_cast<size_t>(n));
  for (int r = 1; r < n; ++r) arrivals[r] = comm_->irecv(&tokens[r], 1, r, kArriveTag);
  std::vector<int> missing;
  if (comm_->pollsRequests()) {
    // Every arrival tested under one deadline: the ranks missing at its end
    // are named together.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<bool> arrived(static_cast<size_t>(n), false);
    for (;;) {
      int waiting = 0;
      for (int r = 1; r < n; ++r) {
        if (!arrived[r]) arrived[r] = arrivals[r]->test();
        waiting += arrived[r] ? 0 : 1;
      }
      if (waiting == 0) break;
      if (std::chrono::steady_clock::now() > deadline) {
        for (int r = 1; r < n; ++r) {
          if (!arrived[r]) missing.push_back(r);
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  } else {
    for (int r = 1; r < n; ++r) {
      try {
        arrivals[r]->wait();
      } catch (const TimeoutError&) {
        missing.push_back(r);
        break;  // Gloo ends the connection at a wait's timeout: the first is named
      }
    }
  }
  if (!missing.empty()) {
    if (!waitAllRanks) missing.resize(1);
    std::string ranks;
    for (const int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    // gloo's words, which scripts and people search for.
    BIGBATCH_THROW(TimeoutError, "Rank{} {} failed to pass monitoredBarrier in {} ms",
                   missing.size() > 1 ? "s" : "", ranks, timeout.count());
  }
  std::vector<std::unique_ptr<Request>> releases;
  for (int r = 1; r < n; ++r) releases.push_back(comm_->isend(&token, 1, r, kReleaseTag));
  for (auto& q : releases) q->wait();
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::compressedAllreduce(
    at::Tensor& buffer, int codec, int64_t bucketIndex, std::vector<BucketSlot> slots) {
  checkCpuTensor(buffer, "a bigbatch comm hook's allreduce");
  BIGBATCH_REQUIRE(buffer.scalar_type() == at::kFloat && buffer.is_contiguous(), InvalidArgument,
                   "a bigbatch comm hook takes DDP's float32 buckets; this one is {} — keep the "
                   "model's parameters in float32 (AMP computes in 16 bits, the gradients stay "
                   "fp32)",
                   c10::toString(buffer.scalar_type()));
  for (const BucketSlot& s : slots) {
    BIGBATCH_REQUIRE(s.offset >= 0 && s.offset + s.numel <= buffer.numel(), InvalidArgument,
                     "a gradient at [{}, {}) lies outside its bucket of {} elements", s.offset,
                     s.offset + s.numel, buffer.numel());
  }
  codecs_.check(codec);
  const CallSignature call{CollectiveKind::kCompressedAllreduce, codec, buffer.numel(),
                           static_cast<int64_t>(buffer.scalar_type())};
  at::Tensor b = buffer;
  return enqueue(::c10d::OpType::ALLREDUCE, "bigbatch:hook_all_reduce", {b}, call,
                 [this, b, codec, bucketIndex, slots]() mutable {
                   ddp_detail::AllreduceWire wire(*comm_, *algorithm_);
                   float* data = b.data_ptr<float>();
                   // The codec leaves the mean, as DDP's hooks hand back.
                   codecs_.exchange(codec, bucketIndex, slots, data, b.numel(), wire,
                                    comm_->size());
                 });
}

}  // namespace bigbatch::torch_backend
