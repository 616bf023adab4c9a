#include "bigbatch/ddp/distributed_data_parallel.h"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "bigbatch/collectives/allreduce_selector.h"
#include "bigbatch/collectives/collectives.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/hash.h"
#include "bigbatch/common/logging.h"
#include "device_staging.h"
#include "nccl_exchange.h"

namespace bigbatch {
namespace {

constexpr int kChecksumTag = 0x7e00;

// Runs after a parameter's AccumulateGrad: the gradient is in its bucket.
class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(DistributedDataParallel* ddp, size_t param) : ddp_(ddp), param_(param) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ddp_->markReady(param_);
    return outputs;
  }

 private:
  DistributedDataParallel* ddp_;
  size_t param_;
};

// FNV-1a over the tensor's bytes in logical (contiguous) order.
int64_t checksum(const torch::Tensor& t) {
  torch::Tensor c = t.detach().contiguous().cpu();
  uint64_t h = fnv1a64(c.data_ptr(), static_cast<size_t>(c.numel()) * c.element_size());
  h ^= static_cast<uint64_t>(c.numel()) * 0x9e3779b97f4a7c15ULL;
  return static_cast<int64_t>(h & 0x7fffffffffffffffULL);
}

// A flat slice seen with `p`'s shape and strides (channels-last stays
// channels-last, so gradient accumulation is a dense add).
torch::Tensor shapedLike(const torch::Tensor& flat, const torch::Tensor& p) {
  return p.is_non_overlapping_and_dense() ? flat.as_strided(p.sizes(), p.strides())
                                          : flat.view(p.sizes());
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(torch::nn::Module& model, Communicator& comm,
                                                 DdpOptions options)
    : model_(model), comm_(comm), options_(std::move(options)), rank_(comm.rank()),
      size_(comm.size()) {
  BIGBATCH_REQUIRE(options_.fusionBytes == 0 || options_.fusionBytes >= 4, InvalidArgument,
                   "fusion_bytes {} must be at least one float (4 bytes), or 0 for auto",
                   options_.fusionBytes);
  BIGBATCH_REQUIRE(options_.tuneSteps >= 1, InvalidArgument,
                   "fusion autotuning needs at least 1 step per candidate (got {})",
                   options_.tuneSteps);
  AllreduceOptions ao;
  ao.checkSignature = false;  // the layout is verified once; every call then matches
  ao.tuneTrials = options_.tune ? ao.tuneTrials : 0;
  if (options_.allreduce == "auto" && !options_.allreduceTable.empty()) {
    AllreduceTable table;
    table.singleHost = parseAllreduceRules(options_.allreduceTable);
    table.multiHost = table.singleHost;
    allreduce_ = std::make_unique<AutoAllreduce>(ao, table);
  } else {
    allreduce_ = makeAllreduce(options_.allreduce, ao);
  }

  for (const auto& item : model_.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    params_.push_back(item.value());
    names_.push_back(item.key());
  }
  std::vector<int64_t> numels;
  for (const auto& p : params_) {
    BIGBATCH_REQUIRE(p.dtype() == torch::kFloat32, InvalidArgument,
                     "parameter '{}' is {}; the exchange keeps fp32 master gradients",
                     names_[numels.size()], std::string(p.dtype().name()));
    numels.push_back(p.numel());
  }
  BIGBATCH_REQUIRE(
      options_.exchangeType == DataType::kFloat32 || options_.exchangeType == DataType::kFloat16 ||
          options_.exchangeType == DataType::kBFloat16,
      InvalidArgument, "gradient exchange type {} must be float32, float16 or bfloat16",
      dataTypeName(options_.exchangeType));
  partitioned_ = options_.partition && size_ > 1;
  const bool onDevice = !params_.empty() && !params_.front().device().is_cpu();
  onNccl_ = size_ > 1 && options_.nccl != nullptr;
  BIGBATCH_REQUIRE(!onNccl_ || (onDevice && options_.ncclStream &&
                                options_.ncclStream->device() == params_.front().device()),
                   InvalidArgument,
                   "the NCCL exchange needs the model on the GPU of its stream (model on {}); "
                   "move the model first, or leave DdpOptions::nccl null",
                   params_.empty() ? std::string("none") : params_.front().device().str());
  staged_ = size_ > 1 && !onNccl_ && (options_.stageThroughHost || onDevice);
  BIGBATCH_REQUIRE(!(partitioned_ && onNccl_), InvalidArgument,
                   "ddp.partition = optimizer reduce-scatters through the host collectives (its "
                   "slices and their optimizer live in host memory), not NCCL: set "
                   "ddp.gpu_exchange = \"host\" (or \"auto\"), or ddp.partition = none");
  for (const auto& p : params_) {
    BIGBATCH_REQUIRE(p.device() == params_.front().device(), InvalidArgument,
                     "the model's parameters are on {} and {}; move the whole model to one "
                     "device before the exchange is built",
                     params_.front().device().str(), p.device().str());
  }
  fusion_ = options_.fusionBytes;
  if (fusion_ == 0) {
    fusion_ = size_t{1} << 20;
    // One rank exchanges nothing; a partitioned run's slices (and its
    // optimizer) would have to be rebuilt at each re-layout.
    if (size_ > 1 && !partitioned_) {
      for (size_t c = size_t{16} << 10;; c *= 4) {
        candidates_.push_back(c);
        if (layoutBuckets(numels, c).size() == 1 || c >= (size_t{64} << 20)) break;
      }
      candidateTimes_.resize(candidates_.size());
      fusion_ = candidates_.front();
      untimed_ = 1;
    }
  }
  ready_.assign(params_.size(), 0);
  layoutFor(fusion_);
  for (size_t i = 0; i < params_.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
    hookKeys_.push_back(acc->add_post_hook(std::make_unique<ReadyHook>(this, i)));
    accumulators_.push_back(std::move(acc));
  }
  // Recursive doubling: the same order of additions on every rank, so every
  // rank gets bit-identical sums (they decide together when to stop).
  scalarAllreduce_ = makeAllreduce("recursive_doubling");
  thread_ = std::make_unique<CommThread>();
}

DistributedDataParallel::~DistributedDataParallel() {
  try {
    thread_->waitAll();
  } catch (...) {
  }
  thread_.reset();
  for (size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(hookKeys_[i]);
}

void DistributedDataParallel::verifyIdentical() {
  std::vector<std::string> names;
  std::vector<int64_t> sums;
  for (const auto& item : model_.named_parameters()) {
    names.push_back(item.key());
    sums.push_back(checksum(item.value()));
  }
  for (const auto& item : model_.named_buffers()) {
    names.push_back(item.key());
    sums.push_back(checksum(item.value()));
  }
  // The bucket layout is part of the contract (fusion_bytes may differ).
  torch::Tensor layout = torch::empty({static_cast<int64_t>(layout_.size()) + 1}, torch::kInt64);
  layout[0] = static_cast<int64_t>(fusion_) * 8 + static_cast<int64_t>(options_.exchangeType);
  for (size_t b = 0; b < layout_.size(); ++b) layout[b + 1] = layout_[b].numel;
  names.push_back("<gradient bucket layout (ddp.fusion_bytes, ddp.exchange_dtype)>");
  sums.push_back(checksum(layout));
  const size_t n = sums.size();
  // Count first, then max(x) and max(-x) of every checksum: equal iff identical.
  std::vector<int64_t> v(2 * n + 2);
  v[0] = static_cast<int64_t>(n);
  v[1] = -static_cast<int64_t>(n);
  for (size_t i = 0; i < n; ++i) {
    v[2 + i] = sums[i];
    v[2 + n + i] = -sums[i];
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
                     names[i], sums[i], -v[2 + n + i], v[2 + i]);
    }
  }
}

void DistributedDataParallel::zeroGrad() {
  thread_->waitAll();  // no exchange may still read the buffers
  if (relayoutTo_ != 0) {
    layoutFor(relayoutTo_);  // autotuning's next candidate, or its choice
    relayoutTo_ = 0;
  }
  for (auto& b : buffers_) b.zero_();
  for (size_t i = 0; i < params_.size(); ++i) {
    // Re-attach a view if user code replaced or dropped the gradient.
    if (!params_[i].grad().defined() ||
        params_[i].grad().data_ptr() != views_[i].data_ptr()) {
      params_[i].mutable_grad() = views_[i];
    }
  }
}

void DistributedDataParallel::beginBackward(bool sync) {
  sync_ = sync && size_ > 1;
  if (sync_) syncStart_ = std::chrono::steady_clock::now();
  std::fill(ready_.begin(), ready_.end(), 0);
  for (size_t b = 0; b < layout_.size(); ++b) {
    pending_[b] = static_cast<int64_t>(layout_[b].entries.size());
  }
  nextLaunch_ = 0;
}

void DistributedDataParallel::markReady(size_t param) {
  if (!sync_ || ready_[param]) return;
  ready_[param] = 1;
  torch::Tensor& g = params_[param].mutable_grad();
  if (g.data_ptr() != views_[param].data_ptr()) {
    // Autograd replaced the gradient tensor: bring it back into the bucket.
    torch::NoGradGuard noGrad;
    views_[param].copy_(g);
    g = views_[param];
  }
  --pending_[bucketOf_[param]];
  if (options_.overlap) launchReadyBuckets();
}

void DistributedDataParallel::launchReadyBuckets() {
  // The last bucket fills at the very end of backward, when there is nothing
  // left to overlap with: finishBackward() reduces it on this thread, which
  // saves two thread hand-offs per step.
  while (nextLaunch_ + 1 < layout_.size() && pending_[nextLaunch_] == 0) launch(nextLaunch_++);
}

void DistributedDataParallel::runWatched(const char* operation, const std::function<void()>& task) {
  thread_->run([&] {
    StallWatchdog::Scope watched(options_.watchdog, StallWatchdog::kCommThread, operation);
    task();
  });
}

void DistributedDataParallel::launch(size_t bucket) {
  if (nccl_) {
    nccl_->ready(bucket);  // enqueued on NCCL's stream; nothing for the host thread
    return;
  }
  if (staging_) staging_->ready(bucket);
  thread_->submit([this, bucket] { reduceBucket(bucket, false); });
}

void DistributedDataParallel::layoutFor(size_t fusionBytes) {
  BIGBATCH_CHECK(!partitioned_ || weights_.empty(), Error,
                 "a partitioned exchange is laid out once (its optimizer holds the slices)");
  std::vector<int64_t> numels;
  for (const auto& p : params_) numels.push_back(p.numel());
  fusion_ = fusionBytes;
  layout_ = layoutBuckets(numels, fusionBytes);
  wire_.assign(layout_.size(), {});
  bucketOf_.assign(params_.size(), 0);
  views_.assign(params_.size(), torch::Tensor());
  pending_.assign(layout_.size(), 0);
  buffers_.clear();
  torch::NoGradGuard noGrad;
  for (size_t b = 0; b < layout_.size(); ++b) {
    buffers_.push_back(torch::zeros({layout_[b].numel}, params_.front().options()));
    if (partitioned_)
      weights_.push_back(torch::empty({layout_[b].numel}, params_.front().options()));
    for (const auto& e : layout_[b].entries) {
      bucketOf_[e.param] = b;
      torch::Tensor& p = params_[e.param];
      if (partitioned_) {
        torch::Tensor w = shapedLike(weights_[b].narrow(0, e.offset, e.numel), p);
        w.copy_(p);
        p.set_data(w);
      }
      torch::Tensor view = shapedLike(buffers_[b].narrow(0, e.offset, e.numel), p);
      if (p.grad().defined()) view.copy_(p.grad());
      p.mutable_grad() = view;
      views_[e.param] = view;
    }
  }
  staging_.reset();
  weightStaging_.reset();
  if (staged_) staging_ = std::make_unique<ddp_detail::DeviceStaging>(buffers_);
  if (staged_ && partitioned_) {
    weightStaging_ = std::make_unique<ddp_detail::DeviceStaging>(weights_, staging_.get());
    // The weights were just copied in on the compute stream: the first
    // read of them on the copy stream waits for that.
    for (size_t b = 0; b < weights_.size(); ++b) weightStaging_->ready(b);
  }
  if (partitioned_) makeShards();
  nccl_.reset();
  if (onNccl_) {
    nccl_ = std::make_unique<ddp_detail::NcclExchange>(*options_.nccl, *options_.ncclStream,
                                                       buffers_, options_.exchangeType);
  }
}

void DistributedDataParallel::tuneFusion(double seconds) {
  if (untimed_ > 0) {
    --untimed_;
    return;
  }
  std::vector<double>& times = candidateTimes_[candidate_];
  times.push_back(seconds);
  if (static_cast<int>(times.size()) < options_.tuneSteps) return;
  if (candidate_ + 1 < candidates_.size()) {
    relayoutTo_ = candidates_[++candidate_];
    untimed_ = 1;
    return;
  }
  // Every candidate timed: the slowest rank's median of each; the least wins.
  std::vector<double> medians;
  for (auto t : candidateTimes_) {
    std::sort(t.begin(), t.end());
    medians.push_back(t[t.size() / 2]);
  }
  medians = allreduceMax(medians);
  const auto best =
      static_cast<size_t>(std::min_element(medians.begin(), medians.end()) - medians.begin());
  std::string table;
  for (size_t c = 0; c < candidates_.size(); ++c) {
    table +=
        fmt::format("{}{} KiB {:.2f} ms", c ? ", " : "", candidates_[c] >> 10, medians[c] * 1e3);
  }
  if (rank_ == 0) {
    log().info(
        "ddp.fusion_bytes = auto chose {} bytes on {} ranks (slowest rank's median step: {})",
        candidates_[best], size_, table);
  }
  tuned_ = true;
  if (candidates_[best] != fusion_) relayoutTo_ = candidates_[best];
}

void DistributedDataParallel::makeShards() {
  for (size_t b = 0; b < layout_.size(); ++b) {
    const int64_t n = layout_[b].numel;
    const auto lo = static_cast<int64_t>(chunkBegin(static_cast<size_t>(n), size_, rank_));
    const auto hi = static_cast<int64_t>(chunkBegin(static_cast<size_t>(n), size_, rank_ + 1));
    // Staged: the slices are views into the host mirrors (the optimizer
    // runs on the host); otherwise into the model's own storage.
    const torch::Tensor& weights = weightStaging_ ? weightStaging_->host(b) : weights_[b];
    const torch::Tensor& grads = staging_ ? staging_->host(b) : buffers_[b];
    for (const auto& e : layout_[b].entries) {
      const int64_t s = std::max(lo, e.offset), t = std::min(hi, e.offset + e.numel);
      if (s >= t) continue;
      shards_.push_back({e.param, names_[e.param], params_[e.param].dim(), s - e.offset, t - s,
                         weights.narrow(0, s, t - s), grads.narrow(0, s, t - s), params_[e.param]});
    }
  }
}

void DistributedDataParallel::reduceBucket(size_t bucket, bool onComputeThread) {
  StallWatchdog::Scope watched(
      options_.watchdog,
      onComputeThread ? StallWatchdog::kComputeThread : StallWatchdog::kCommThread,
      partitioned_ ? "the gradient reduce-scatter" : "the gradient allreduce");
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor& buf = buffers_[bucket];
  const size_t n = static_cast<size_t>(buf.numel());
  // Partitioned: this rank's chunk [lo, hi) of the bucket.
  const size_t lo = chunkBegin(n, size_, rank_), hi = chunkBegin(n, size_, rank_ + 1);
  float* data = staging_ ? staging_->toHost(bucket) : buf.data_ptr<float>();
  if (options_.exchangeType == DataType::kFloat32) {
    if (partitioned_) {
      reduceScatter(comm_, data, n, DataType::kFloat32, /*checkSignature=*/false);
    } else {
      allreduce_->run(comm_, data, n, DataType::kFloat32);
    }
  } else {
    std::vector<uint8_t>& wire = wire_[bucket];
    const size_t bytes = elementSize(options_.exchangeType);
    wire.resize(n * bytes);
    packFloats(options_.exchangeType, wire.data(), data, n, 1.0f / static_cast<float>(size_));
    if (partitioned_) {
      // Only this rank's chunk holds the sum; only it is unpacked.
      reduceScatter(comm_, wire.data(), n, options_.exchangeType, /*checkSignature=*/false);
      unpackFloats(options_.exchangeType, data + lo, wire.data() + lo * bytes, hi - lo,
                   static_cast<float>(size_));
    } else {
      allreduce_->run(comm_, wire.data(), n, options_.exchangeType);
      unpackFloats(options_.exchangeType, data, wire.data(), n, static_cast<float>(size_));
    }
  }
  if (staging_ && partitioned_) {
    // The optimizer updates this rank's slice on the host: its summed
    // gradient stays in the mirror, and its current weights come up beside
    // it (S/N bytes; the device's weights are the ones all ranks gathered).
    weightStaging_->toHost(bucket, static_cast<int64_t>(lo), static_cast<int64_t>(hi));
  } else if (staging_) {
    staging_->toDevice(bucket);
  }
  if (options_.onExchange) {
    options_.onExchange(bucket, n * elementSize(options_.exchangeType), start,
                        std::chrono::steady_clock::now(), onComputeThread);
  }
}

void DistributedDataParallel::gatherWeights() {
  if (!partitioned_) return;
  // The last bucket holds the first layers, which the next forward needs first.
  for (size_t b = layout_.size(); b-- > 0;) {
    // Staged: what the compute stream queued so far (reads of the old
    // weights) comes before the new weights are copied over them.
    if (weightStaging_) weightStaging_->ready(b);
    gatherTicket_ = thread_->submit([this, b] {
      StallWatchdog::Scope watched(options_.watchdog, StallWatchdog::kCommThread,
                                   "the weight all-gather");
      const auto start = std::chrono::steady_clock::now();
      float* weights = weightStaging_ ? weightStaging_->host(b).data_ptr<float>()
                                      : weights_[b].data_ptr<float>();
      allgather(comm_, weights, static_cast<size_t>(weights_[b].numel()), DataType::kFloat32,
                /*checkSignature=*/false);
      if (weightStaging_) weightStaging_->toDevice(b);
      if (options_.onExchange) {
        options_.onExchange(b, static_cast<size_t>(weights_[b].numel()) * sizeof(float), start,
                            std::chrono::steady_clock::now(), false);
      }
    });
  }
}

double DistributedDataParallel::waitWeights() {
  if (gatherTicket_ == 0) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t ticket = gatherTicket_;
  gatherTicket_ = 0;
  thread_->waitFor(ticket);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<torch::Tensor> DistributedDataParallel::gatherShards(
    const std::vector<torch::Tensor>& mine) {
  BIGBATCH_REQUIRE(partitioned_ && mine.size() == shards_.size(), InvalidArgument,
                   "gatherShards: {} slices given, this rank holds {}{}", mine.size(),
                   shards_.size(), partitioned_ ? "" : " (the exchange is not partitioned)");
  waitWeights();
  torch::NoGradGuard noGrad;
  std::vector<torch::Tensor> flats;
  for (const auto& b : layout_) flats.push_back(torch::zeros({b.numel}, torch::kFloat32));
  for (size_t i = 0; i < shards_.size(); ++i) {
    const ParameterShard& s = shards_[i];
    BIGBATCH_REQUIRE(mine[i].numel() == s.numel, InvalidArgument,
                     "gatherShards: slice of '{}' has {} values, the shard {}", s.name,
                     mine[i].numel(), s.numel);
    const BucketEntry* entry = nullptr;
    for (const auto& e : layout_[bucketOf_[s.param]].entries) {
      if (e.param == s.param) entry = &e;
    }
    flats[bucketOf_[s.param]]
        .narrow(0, entry->offset + s.begin, s.numel)
        .copy_(mine[i].reshape({-1}));
  }
  runWatched("the optimizer-state all-gather", [&] {
    for (auto& f : flats) {
      allgather(comm_, f.data_ptr<float>(), static_cast<size_t>(f.numel()), DataType::kFloat32);
    }
  });
  std::vector<torch::Tensor> whole(params_.size());
  for (size_t b = 0; b < layout_.size(); ++b) {
    for (const auto& e : layout_[b].entries) {
      whole[e.param] = shapedLike(flats[b].narrow(0, e.offset, e.numel), params_[e.param]);
    }
  }
  return whole;
}

std::vector<std::string> DistributedDataParallel::gatherToRoot(const std::string& mine) {
  std::vector<std::string> all;
  if (rank_ == 0) all.push_back(mine);
  if (size_ == 1) return all;
  constexpr int kGatherTag = 0x7e20;
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

double DistributedDataParallel::finishBackward() {
  if (!sync_) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  // Buckets not launched yet — the last one, and any whose parameters took
  // no part in this backward (their zero gradients are exchanged too: every
  // rank must reduce every bucket) — are reduced here, in order, once the
  // communication thread is idle (MPI is entered by one thread at a time).
  thread_->waitAll();
  if (nccl_) {
    for (; nextLaunch_ < layout_.size(); ++nextLaunch_) nccl_->ready(nextLaunch_);
    nccl_->finish(options_.watchdog);
  }
  for (; nextLaunch_ < layout_.size(); ++nextLaunch_) {
    if (staging_) staging_->ready(nextLaunch_);
    reduceBucket(nextLaunch_, true);
  }
  sync_ = false;
  const auto t1 = std::chrono::steady_clock::now();
  if (!candidates_.empty() && !tuned_) {
    tuneFusion(std::chrono::duration<double>(t1 - syncStart_).count());
  }
  return std::chrono::duration<double>(t1 - t0).count();
}

std::vector<double> DistributedDataParallel::allreduceSum(std::vector<double> values) {
  if (size_ == 1 || values.empty()) return values;
  runWatched("a scalar allreduce (loss, accuracy, timing totals)", [&] {
    scalarAllreduce_->run(comm_, values.data(), values.size(), DataType::kFloat64);
  });
  return values;
}

std::vector<double> DistributedDataParallel::allreduceMax(std::vector<double> values) {
  if (size_ == 1 || values.empty()) return values;
  // Order-preserving map of doubles to int64 for the integer max.
  std::vector<int64_t> v(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    int64_t bits;
    std::memcpy(&bits, &values[i], sizeof bits);
    v[i] = bits >= 0 ? bits : bits ^ 0x7fffffffffffffffLL;
  }
  runWatched("a scalar max-allreduce (timing totals)",
             [&] { allreduceMaxInt64(comm_, v.data(), v.size(), kChecksumTag + 1); });
  for (size_t i = 0; i < values.size(); ++i) {
    int64_t bits = v[i] >= 0 ? v[i] : v[i] ^ 0x7fffffffffffffffLL;
    std::memcpy(&values[i], &bits, sizeof bits);
  }
  return values;
}

std::vector<double> DistributedDataParallel::allreduceMin(std::vector<double> values) {
  for (auto& x : values) x = -x;
  values = allreduceMax(std::move(values));
  for (auto& x : values) x = -x;
  return values;
}

std::map<std::string, double> DistributedDataParallel::allreduceTuning() const {
  auto* tuned = dynamic_cast<AutoAllreduce*>(allreduce_.get());
  std::map<std::string, double> state =
      tuned ? tuned->tuningState(comm_) : std::map<std::string, double>{};
  // The fusion autotuning's choice (not a half-done tuning: a resume from
  // inside it tunes again).
  if (!candidates_.empty() && tuned_) {
    state["fusion_tuning.bytes"] = static_cast<double>(relayoutTo_ != 0 ? relayoutTo_ : fusion_);
  }
  return state;
}

void DistributedDataParallel::restoreAllreduceTuning(const std::map<std::string, double>& state) {
  if (auto* tuned = dynamic_cast<AutoAllreduce*>(allreduce_.get())) {
    tuned->restoreTuning(comm_, state);
  }
  const auto fusion = state.find("fusion_tuning.bytes");
  if (fusion != state.end() && !candidates_.empty() && fusion->second >= 4) {
    tuned_ = true;
    const auto bytes = static_cast<size_t>(fusion->second);
    if (bytes != fusion_) relayoutTo_ = bytes;  // at the first zeroGrad()
  }
}

void DistributedDataParallel::postError(const std::string& message) {
  thread_->runAfterFailure([&] { comm_.postError(message); });
}

void DistributedDataParallel::averageBuffers() {
  // A fixed algorithm, not the tuned one: the statistics are small, and
  // their sum must not depend on a choice made by timing (on 3+ ranks the
  // algorithms add in different orders; a resume must reproduce the bits).
  exchangeBuffers("the BatchNorm statistics allreduce", [&](torch::Tensor& flat) {
    scalarAllreduce_->run(comm_, flat.data_ptr(), static_cast<size_t>(flat.numel()),
                          DataType::kFloat32);
    flat.div_(size_);
  });
}

void DistributedDataParallel::broadcastBuffers(int root) {
  exchangeBuffers("the BatchNorm statistics broadcast", [&](torch::Tensor& flat) {
    broadcast(comm_, flat.data_ptr(), static_cast<size_t>(flat.numel()) * sizeof(float), root);
  });
}

void DistributedDataParallel::exchangeBuffers(const char* operation,
                                              const std::function<void(torch::Tensor&)>& fn) {
  if (size_ == 1) return;
  std::vector<torch::Tensor> floats;
  for (const auto& b : model_.buffers()) {
    if (b.is_floating_point()) floats.push_back(b);
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

}  // namespace bigbatch
