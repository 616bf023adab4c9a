#include "bigbatch/comm/in_process_communicator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/ranges.h>

#include "bigbatch/common/error.h"

namespace bigbatch {

struct InProcessMessage {
  int src;
  int tag;
  std::vector<uint8_t> bytes;
};

// State shared by the ranks of one group. Guarded by mutex_.
class InProcessGroup : public std::enable_shared_from_this<InProcessGroup> {
 public:
  explicit InProcessGroup(std::vector<int> hostOf) : hostOf_(std::move(hostOf)), mailbox_(hostOf_.size()) {}

  int size() const { return static_cast<int>(hostOf_.size()); }
  int hostOf(int rank) const { return hostOf_[rank]; }

  void post(int src, int dst, int tag, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto* p = static_cast<const uint8_t*>(data);
    mailbox_[dst].push_back({src, tag, std::vector<uint8_t>(p, p + bytes)});
    cv_.notify_all();
  }

  // Blocks until a message from (src, tag) reaches `dst`, then copies it out.
  // Takes the message of `tag` from `src` (-1: any rank, then set to the
  // sender's). `poll`: false at once when none has arrived.
  bool take(int dst, int& src, int tag, void* data, size_t bytes, int64_t timeoutMs,
            bool poll = false) {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    auto& box = mailbox_[dst];
    while (true) {
      // A message already delivered is taken even after a peer failed, as an
      // MPI receive that matched would complete.
      auto it = std::find_if(box.begin(), box.end(), [&](const InProcessMessage& m) {
        return (src < 0 || m.src == src) && m.tag == tag;
      });
      if (it != box.end()) {
        if (it->bytes.size() != bytes) {
          BIGBATCH_THROW(MismatchError,
                         "message from rank {} (tag {}) holds {} bytes, this rank expected {}: "
                         "the ranks called the collective with different sizes or types",
                         src, tag, it->bytes.size(), bytes);
        }
        if (bytes) std::memcpy(data, it->bytes.data(), bytes);
        src = it->src;
        box.erase(it);
        return true;
      }
      if (!error_.empty()) {
        throw MismatchError(detail::withRank(fmt::format("a peer failed: {}", error_)));
      }
      if (poll) return false;
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        BIGBATCH_THROW(TimeoutError,
                       "rank {} sent nothing (tag {}) within {} ms (in-process recv); the peer "
                       "may have failed, hung, or called another collective",
                       src, tag, timeoutMs);
      }
    }
  }

  // Waits, holding `lock`, until every rank reached a rendezvous; on timeout
  // the error names the ranks that did not.
  template <typename Present>
  void awaitAll(std::unique_lock<std::mutex>& lock, const int& arrived, Present present,
                int64_t timeoutMs, const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (arrived < size()) {
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        std::vector<int> missing;
        for (int r = 0; r < size(); ++r) {
          if (!present(r)) missing.push_back(r);
        }
        BIGBATCH_THROW(TimeoutError, "{}: rank {} did not arrive within {} ms ({} of {} arrived)",
                       what, fmt::join(missing, ", "), timeoutMs, arrived, size());
      }
    }
  }

  void checkError() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_.empty()) {
      throw MismatchError(detail::withRank(fmt::format("a peer failed: {}", error_)));
    }
  }

  // Collective: the ranks' n-th calls share one zeroed heap block.
  std::shared_ptr<std::vector<uint8_t>> allocateShared(int rank, size_t bytes, int64_t timeoutMs) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int seq = sharedSeq_[rank]++;
    auto& state = shared_[seq];
    if (!state.block) state.block = std::make_shared<std::vector<uint8_t>>(bytes, 0);
    BIGBATCH_REQUIRE(state.block->size() == bytes, MismatchError,
                     "ranks asked for shared segments of {} and {} bytes", state.block->size(),
                     bytes);
    ++state.arrived;
    state.present.resize(size());
    state.present[rank] = true;
    cv_.notify_all();
    awaitAll(lock, state.arrived, [&](int r) { return static_cast<bool>(state.present[r]); },
             timeoutMs, "shared segment");
    return state.block;
  }

  void postError(const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.empty()) error_ = message;
    cv_.notify_all();
  }

  // Collective: every rank posts (color, key); returns this rank's new group.
  std::pair<std::shared_ptr<InProcessGroup>, int> split(int rank, int color, int key,
                                                        int64_t timeoutMs) {
    std::unique_lock<std::mutex> lock(mutex_);
    const int seq = splitSeq_[rank]++;
    auto& state = splits_[seq];
    if (state.entries.empty()) state.entries.resize(size());
    state.entries[rank] = {color, key, true};
    ++state.arrived;
    cv_.notify_all();
    awaitAll(lock, state.arrived, [&](int r) { return state.entries[r].present; }, timeoutMs,
             "split");
    if (state.groups.empty()) {
      std::map<int, std::vector<std::pair<int, int>>> members;  // color -> (key, rank)
      for (int r = 0; r < size(); ++r) members[state.entries[r].color].push_back({state.entries[r].key, r});
      for (auto& [c, list] : members) {
        std::sort(list.begin(), list.end());
        std::vector<int> hosts;
        for (auto& [k, r] : list) hosts.push_back(hostOf_[r]);
        auto group = std::make_shared<InProcessGroup>(hosts);
        for (size_t i = 0; i < list.size(); ++i) state.newRank[list[i].second] = static_cast<int>(i);
        state.groups[c] = group;
      }
    }
    return {state.groups[color], state.newRank[rank]};
  }

 private:
  struct SplitEntry {
    int color = 0, key = 0;
    bool present = false;
  };
  struct SplitState {
    std::vector<SplitEntry> entries;
    int arrived = 0;
    std::map<int, std::shared_ptr<InProcessGroup>> groups;
    std::map<int, int> newRank;
  };

  const std::vector<int> hostOf_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::deque<InProcessMessage>> mailbox_;  // by destination rank
  std::string error_;
  std::map<int, int> splitSeq_;
  std::map<int, SplitState> splits_;
  struct SharedState {
    std::shared_ptr<std::vector<uint8_t>> block;
    int arrived = 0;
    std::vector<bool> present;
  };
  std::map<int, int> sharedSeq_;
  std::map<int, SharedState> shared_;
};

namespace {

class DoneRequest : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class InProcessRecv : public Request {
 public:
  InProcessRecv(std::shared_ptr<InProcessGroup> g, int dst, int src, int tag, void* data,
                size_t bytes, int64_t timeoutMs)
      : g_(std::move(g)), dst_(dst), src_(src), tag_(tag), data_(data), bytes_(bytes),
        timeoutMs_(timeoutMs) {}
  void wait() override {
    if (done_) return;
    g_->take(dst_, src_, tag_, data_, bytes_, timeoutMs_);
    done_ = true;
  }
  bool test() override {
    if (!done_) done_ = g_->take(dst_, src_, tag_, data_, bytes_, 0, /*poll=*/true);
    return done_;
  }
  int source() const override { return src_; }

 private:
  std::shared_ptr<InProcessGroup> g_;
  int dst_, src_, tag_;
  void* data_;
  size_t bytes_;
  int64_t timeoutMs_;
  bool done_ = false;
};

class InProcessSharedSegment : public SharedSegment {
 public:
  InProcessSharedSegment(std::shared_ptr<std::vector<uint8_t>> block, size_t slotBytes)
      : block_(std::move(block)), slotBytes_(slotBytes) {}
  uint8_t* slot(int rank) override { return block_->data() + slotBytes_ * static_cast<size_t>(rank); }
  size_t slotBytes() const override { return slotBytes_; }

 private:
  std::shared_ptr<std::vector<uint8_t>> block_;
  size_t slotBytes_;
};

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {
    for (int r = 0; r < group_->size(); ++r) {
      if (group_->hostOf(r) == group_->hostOf(rank_)) {
        if (r < rank_) ++localRank_;
        ++localSize_;
      }
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  int localRank() const override { return localRank_; }
  int localSize() const override { return localSize_; }
  std::string transportName() const override { return "in-process"; }

  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, int tag) override {
    checkPeer(peer);
    group_->post(rank_, peer, tag, data, bytes);
    return std::make_unique<DoneRequest>();
  }
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, int tag) override {
    checkPeer(peer);
    return std::make_unique<InProcessRecv>(group_, rank_, peer, tag, data, bytes, timeoutMs_);
  }
  std::unique_ptr<Request> irecvAny(void* data, size_t bytes, int tag) override {
    return std::make_unique<InProcessRecv>(group_, rank_, -1, tag, data, bytes, timeoutMs_);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    auto [group, newRank] = group_->split(rank_, color, key, timeoutMs_);
    auto c = std::make_unique<InProcessCommunicator>(group, newRank);
    c->setTimeoutMs(timeoutMs_);
    return c;
  }
  void postError(const std::string& message) override { group_->postError(message); }
  void pollPeerErrors() override { group_->checkError(); }

 protected:
  int hostColor() override { return group_->hostOf(rank_); }
  std::unique_ptr<SharedSegment> allocateShared(size_t slotBytes) override {
    slotBytes = (std::max<size_t>(slotBytes, 64) + 63) / 64 * 64;
    auto block = group_->allocateShared(rank_, slotBytes * static_cast<size_t>(size()), timeoutMs_);
    return std::make_unique<InProcessSharedSegment>(std::move(block), slotBytes);
  }

 private:
  void checkPeer(int peer) const {
    BIGBATCH_REQUIRE(peer >= 0 && peer < size(), InvalidArgument, "peer {} is outside 0..{}", peer,
                     size() - 1);
  }
  std::shared_ptr<InProcessGroup> group_;
  int rank_;
  int localRank_ = 0, localSize_ = 0;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> makeInProcessGroup(int size, int ranksPerHost) {
  BIGBATCH_REQUIRE(size >= 1, InvalidArgument, "group size {} must be at least 1", size);
  if (ranksPerHost <= 0) ranksPerHost = size;
  std::vector<int> hosts(size);
  for (int r = 0; r < size; ++r) hosts[r] = r / ranksPerHost;
  auto group = std::make_shared<InProcessGroup>(hosts);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r) comms.push_back(std::make_unique<InProcessCommunicator>(group, r));
  return comms;
}

void runInProcess(int size, const std::function<void(Communicator&)>& fn, int ranksPerHost,
                  int64_t timeoutMs) {
  auto comms = makeInProcessGroup(size, ranksPerHost);
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    comms[r]->setTimeoutMs(timeoutMs);
    threads.emplace_back([&, r] {
      setThreadErrorRank(r);
      try {
        fn(*comms[r]);
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        comms[r]->postError(fmt::format("rank {}: {}", r, e.what()));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace bigbatch
