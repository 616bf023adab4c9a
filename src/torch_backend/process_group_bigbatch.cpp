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

namespace bigbatch::torch_backend {
namespace {

std::atomic<int> live{0};   // groups not yet stopped (quiesce)
std::atomic<int> alive{0};  // group objects not yet destroyed
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
                       errorRank(), operation.c_str(), seconds,
                       hb->describeLaggards(sequence_.load(), Heartbeat::kExchange).c_str());
          endJob(1);
        },
        [hb] { hb->pulse(); });
  }
  comm_->barrier();  // every rank is here: the group exists
  if (comm_->pollsRequests()) {
    // Collective, like the barrier: every rank's transport says the same.
    p2p_ = std::make_unique<PointToPoint>(comm_->split(0, comm_->rank()), *comm_);
  }
  completions_ = std::make_unique<CompletionPool>();
  std::function<bool()> poll;
  if (p2p_) poll = [this] { return p2p_->poll(); };
  scheduler_ = std::make_unique<CollectiveScheduler>(std::move(poll));
  ++live;
  ++alive;
  {
    const std::lock_guard<std::mutex> lock(groupsMutex);
    groups->insert(this);
  }
  // Every rank reached the barrier: an earlier group's failure (its group
  // destroyed since) no longer means a peer is gone — unless another group
  // is still live (a subgroup made after a failure the script caught): its
  // failure still ends the job at exit.
  const std::lock_guard<std::mutex> lock(failureMutex);
  if (live.load() == 1) failure.clear();
}

int ProcessGroupBigbatch::liveGroups() { return live.load(); }

void ProcessGroupBigbatch::recordProcessFailure(const std::string& what) {
  const std::lock_guard<std::mutex> lock(failureMutex);
  if (failure.empty()) failure = what;
}

int ProcessGroupBigbatch::aliveGroups() { return alive.load(); }

std::string ProcessGroupBigbatch::processFailure() {
  const std::lock_guard<std::mutex> lock(failureMutex);
  return failure;
}

void ProcessGroupBigbatch::quiesce() {
  // shutdownAll, shutdown and the destructor
  const std::lock_guard<std::mutex> lock(quiesceMutex_);
  // From here a send or receive that fails (a peer that ended first) is the
  // group's end, not a failure of the job.
  shuttingDown_ = true;
  scheduler_->stop();    // runs what is queued (the thread still uses scheduler_)
  if (p2p_) {
    // Sends and receives still in flight (the thread has stopped: this one
    // may touch them now): a send already delivered but not yet tested
    // completes here; one whose peer is slow gets a short grace; what is
    // left (a receive nobody will match) fails its Work — no peer is told,
    // the process ends normally.
    const auto until = std::chrono::steady_clock::now() + kPointToPointGrace;
    while (p2p_->poll() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    p2p_->failAll("the bigbatch process group was destroyed before this operation completed");
  }
  completions_.reset();  // runs the callbacks handed over
  pulse_.reset();
  if (!quiesced_) {  // a group stopped no longer counts, though it may still exist
    quiesced_ = true;
    --live;
  }
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
  // A group ended inside its own callback left that completion thread
  // detached, perhaps still dropping the callback's Python objects.
  CompletionPool::waitForDetached(std::chrono::seconds(10));
}

void ProcessGroupBigbatch::endCallbacksRunningHere() {
  // This thread runs one of this group's future callbacks, which is ending
  // the group: the scheduler stops once every family's callbacks have
  // ended, this one's included, which cannot end while its thread is here.
  // End it now (the thread's task then leaves the scheduler alone), and the
  // pool, stopped on its own thread, detaches that thread instead of
  // joining it.
  if (runningCallbacks.group != this) return;
  runningCallbacks.groupEnded = true;
  runningCallbacks.group = nullptr;  // a group made later at this address is another
  scheduler_->callbacksEnded(runningCallbacks.family);
}

void ProcessGroupBigbatch::shutdown() {
  endCallbacksRunningHere();  // destroy_process_group called inside a callback
  // A future's Python callback may be waiting for the GIL the caller holds.
  if (joinGuard()) {
    joinGuard()([this] { quiesce(); });
  } else {
    quiesce();
  }
}

ProcessGroupBigbatch::~ProcessGroupBigbatch() {
  {
    const std::lock_guard<std::mutex> lock(groupsMutex);
    groups->erase(this);
  }
  // The script dropped its last reference inside one of this group's
  // future callbacks: this runs on the completion thread running it.
  endCallbacksRunningHere();
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
  --alive;
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
                   errorRank(), describeCall(call), brokenBy_))),
               family);
      return;
    }
  }
  try {
    if (heartbeat_) heartbeat_->beat(seq, Heartbeat::kExchange);
    const std::string what = describeCall(call);
    // The monitored barrier keeps its own deadline (the caller's, which may
    // be past the watchdog's limit) and raises at it: not watched.
    const StallWatchdog::Scope watched(
        call.kind == CollectiveKind::kMonitoredBarrier ? nullptr : pulse_.get(),
        StallWatchdog::kCommThread, what.c_str());
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
    p2p_->failAll(fmt::format("[rank {}] the bigbatch process group failed: {}", errorRank(),
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

}  // namespace bigbatch::torch_backend
