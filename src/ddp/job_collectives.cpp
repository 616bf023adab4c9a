#include "bigbatch/ddp/job_collectives.h"

#include <algorithm>
#include <cstring>

#include "bigbatch/collectives/collectives.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/hash.h"

namespace bigbatch {
namespace {

constexpr int kChecksumTag = 0x7e00;
constexpr int kMaxTag = kChecksumTag + 1;
constexpr int kGatherTag = 0x7e20;

}  // namespace

int64_t tensorChecksum(const torch::Tensor& t) {
  torch::Tensor c = t.detach().contiguous().cpu();
  uint64_t h = fnv1a64(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
  h ^= static_cast<uint64_t>(c.numel()) * 0x9e3779b97f4a7c15ULL;
  return static_cast<int64_t>(h & 0x7fffffffffffffffULL);
}

JobCollectives::JobCollectives(Communicator& comm, StallWatchdog* watchdog)
    : comm_(comm), watchdog_(watchdog), rank_(comm.rank()), size_(comm.size()),
      sum_(makeAllreduce("recursive_doubling")), thread_(std::make_unique<CommThread>()) {}

JobCollectives::~JobCollectives() {
  try {
    thread_->waitAll();
  } catch (...) {
  }
}

void JobCollectives::runWatched(const char* operation, const std::function<void()>& task) {
  thread_->run([&] {
    StallWatchdog::Scope watched(watchdog_, StallWatchdog::kCommThread, operation);
    task();
  });
}

std::vector<double> JobCollectives::allreduceSum(std::vector<double> values) {
  if (size_ == 1 || values.empty()) return values;
  runWatched("a scalar allreduce (loss, accuracy, timing totals)",
             [&] { sum_->run(comm_, values.data(), values.size(), DataType::kFloat64); });
  return values;
}

std::vector<double> JobCollectives::allreduceMax(std::vector<double> values) {
  if (size_ == 1 || values.empty()) return values;
  // Order-preserving map of doubles to int64 for the integer max.
  std::vector<int64_t> v(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    int64_t bits;
    std::memcpy(&bits, &values[i], sizeof bits);
    v[i] = bits >= 0 ? bits : bits ^ 0x7fffffffffffffffLL;
  }
  runWatched("a scalar max-allreduce (timing totals)",
             [&] { allreduceMaxInt64(comm_, v.data(), v.size(), kMaxTag); });
  for (size_t i = 0; i < values.size(); ++i) {
    int64_t bits = v[i] >= 0 ? v[i] : v[i] ^ 0x7fffffffffffffffLL;
    std::memcpy(&values[i], &bits, sizeof bits);
  }
  return values;
}

uint64_t JobCollectives::startMax(std::shared_ptr<int64_t> value, const char* operation) {
  if (size_ == 1) return 0;
  return thread_->submit([this, value, operation] {
    StallWatchdog::Scope watched(watchdog_, StallWatchdog::kCommThread, operation);
    allreduceMaxInt64(comm_, value.get(), 1, kMaxTag);
  });
}

void JobCollectives::finishMax(uint64_t ticket) {
  if (ticket > 0) thread_->waitFor(ticket);
}

std::vector<double> JobCollectives::allreduceMin(std::vector<double> values) {
  for (auto& x : values) x = -x;
  values = allreduceMax(std::move(values));
  for (auto& x : values) x = -x;
  return values;
}

std::vector<std::string> JobCollectives::gatherToRoot(const std::string& mine) {
  std::vector<std::string> all;
  if (rank_ == 0) all.push_back(mine);
  if (size_ == 1) return all;
  runWatched("a gather to rank 0", [&] {
    if (rank_ != 0) {
      const uint64_t bytes = mine.size();
      comm_.send(&bytes, sizeof bytes, 0, kGatherTag);
      comm_.send(mine.data(), mine.size(), 0, kGatherTag);
      return;
    }
    for (int r = 1; r < size_; ++r) {
      uint64_t bytes = 0;
      comm_.recv(&bytes, sizeof bytes, r, kGatherTag);
      std::string text(bytes, '\0');
      comm_.recv(text.data(), bytes, r, kGatherTag);
      all.push_back(std::move(text));
    }
  });
  return all;
}

void JobCollectives::averageBuffers(torch::nn::Module& model,
                                    const std::vector<std::string>& frozen) {
  exchangeBuffers(model, "the BatchNorm statistics allreduce", frozen, [&](torch::Tensor& flat) {
    sum_->run(comm_, flat.data_ptr(), static_cast<size_t>(flat.numel()), DataType::kFloat32);
    flat.div_(size_);
  });
}

void JobCollectives::broadcastBuffers(torch::nn::Module& model, int root,
                                      const std::vector<std::string>& frozen) {
  exchangeBuffers(model, "the BatchNorm statistics broadcast", frozen, [&](torch::Tensor& flat) {
    broadcast(comm_, flat.data_ptr(), static_cast<size_t>(flat.numel()) * sizeof(float), root);
  });
}

void JobCollectives::exchangeBuffers(torch::nn::Module& model, const char* operation,
                                     const std::vector<std::string>& frozen,
                                     const std::function<void(torch::Tensor&)>& fn) {
  if (size_ == 1) return;
  std::vector<torch::Tensor> floats;
  for (const auto& b : model.named_buffers()) {
    if (!b.value().is_floating_point()) continue;
    if (std::find(frozen.begin(), frozen.end(), b.key()) != frozen.end()) continue;
    floats.push_back(b.value());
  }
  if (floats.empty()) return;
  torch::NoGradGuard noGrad;
  std::vector<torch::Tensor> flatParts;
  for (auto& b : floats) flatParts.push_back(b.reshape({-1}).to(torch::kFloat32));
  torch::Tensor flat = torch::cat(flatParts).to(torch::kCPU).contiguous();  // host collectives
  runWatched(operation, [&] { fn(flat); });
  int64_t offset = 0;
  for (auto& b : floats) {
    b.copy_(flat.narrow(0, offset, b.numel()).view(b.sizes()));
    offset += b.numel();
  }
}

void JobCollectives::verifyIdentical(const std::vector<std::string>& names,
                                     const std::vector<int64_t>& checksums) {
  const size_t n = checksums.size();
  // Count first, then max(x) and max(-x) of every checksum: equal iff identical.
  std::vector<int64_t> v(2 * n + 2);
  v[0] = static_cast<int64_t>(n);
  v[1] = -static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    v[2 + i] = checksums[i];
    v[2 + n + i] = -checksums[i];
  }
  runWatched("the initial-weights checksum allreduce", [&] {
    checkSameSignature(comm_, /*operation=*/100, v.size(), DataType::kInt64);
    allreduceMaxInt64(comm_, v.data(), v.size(), kChecksumTag);
  });
  BIGBATCH_REQUIRE(v[0] == -v[1], MismatchError,
                   "ranks hold models with different numbers of tensors ({} to {}); every rank "
                   "must build the same model from the same config",
                   -v[1], v[0]);
  for (size_t i = 0; i < n; ++i) {
    if (v[2 + i] != -v[2 + n + i]) {
      BIGBATCH_THROW(MismatchError,
                     "ranks disagree on the initial value of '{}' (checksum of this rank {}, "
                     "range across ranks [{}, {}]); every rank must start from the same "
                     "run.seed and config (no weights are broadcast)",
                     names[i], checksums[i], -v[2 + n + i], v[2 + i]);
    }
  }
}

void JobCollectives::postError(const std::string& message) {
  thread_->runAfterFailure([&] { comm_.postError(message); });
}

}  // namespace bigbatch
