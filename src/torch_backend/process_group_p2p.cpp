// ProcessGroupBigbatch's sends and receives (point_to_point.h) and its
// monitored barrier (process_group_bigbatch.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bigbatch/common/error.h"
#include "c10d_arguments.h"
#include "process_group_bigbatch.h"

namespace bigbatch::torch_backend {

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
                         errorRank(), isSend ? "send" : "recv", brokenBy_))),
                     kNoFamily);
            return;
          }
        }
        auto done = [this, work, isSend](std::exception_ptr error, int source) {
          // A send or receive that failed (a timeout, a lost peer, sizes
          // that differ) breaks the group as a collective does; one ended
          // by the group's destruction, or by its peer's normal end (a
          // receive nobody sends to, the script's to fail), does not.
          if (error && !shuttingDown_) {
            try {
              std::rethrow_exception(error);
            } catch (const PeerEndedError&) {
            } catch (const std::exception& e) {
              recordFailure(e.what());
            }
          }
          if (!isSend) work->setSourceRank(source);
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
    // One deadline over the waits, each given what is left of it.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int r = 1; r < n; ++r) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      comm_->setTimeoutMs(std::max<int64_t>(1, left.count()));
      try {
        arrivals[r]->wait();
      } catch (const TimeoutError&) {
        missing.push_back(r);
        break;  // Gloo ends the connection at a wait's timeout: the first is named
      }
    }
    comm_->setTimeoutMs(timeout.count());
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

}  // namespace bigbatch::torch_backend
