#include "bigbatch/ddp/distributed_data_parallel.h"

#include "bigbatch/collectives/allreduce_selector.h"
#include "bigbatch/common/error.h"
#include "device_codec.h"
#include "device_staging.h"
#include "fusion_tuner.h"
#include "gradient_buckets.h"
#include "gradient_codec.h"
#include "host_reducer.h"
#include "nccl_reducer.h"
#include "partitioned_exchange.h"
#include "staged_reducer.h"
#include "wire_sums.h"

namespace bigbatch {
namespace {

std::unique_ptr<Allreduce> makeGradientAllreduce(const DdpOptions& o) {
  AllreduceOptions ao;
  ao.checkSignature = false;  // the layout is verified once; every call then matches
  ao.tuneTrials = o.tune ? ao.tuneTrials : 0;
  if (o.allreduce == "auto" && !o.allreduceTable.empty()) {
    AllreduceTable table;
    table.singleHost = parseAllreduceRules(o.allreduceTable);
    table.multiHost = table.singleHost;
    return std::make_unique<AutoAllreduce>(ao, table);
  }
  return makeAllreduce(o.allreduce, ao);
}

}  // namespace

using namespace ddp_detail;

// Set-up, in order: the options checked, the gradient algorithm, the
// buckets, the codec (the device one on the NCCL path) and the transport,
// the gradient hooks.
DistributedDataParallel::DistributedDataParallel(torch::nn::Module& model, JobCollectives& job,
                                                 DdpOptions options)
    : model_(model), job_(job), options_(std::move(options)), rank_(job.rank()),
      size_(job.size()) {
  BIGBATCH_REQUIRE(options_.fusionBytes == 0 || options_.fusionBytes >= 4, InvalidArgument,
                   "fusion_bytes {} must be at least one float (4 bytes), or 0 for auto",
                   options_.fusionBytes);
  BIGBATCH_REQUIRE(options_.tuneSteps >= 1, InvalidArgument,
                   "fusion autotuning needs at least 1 step per candidate (got {})",
                   options_.tuneSteps);
  allreduce_ = makeGradientAllreduce(options_);
  // One rank on a GPU exchanges nothing: its gradients stay autograd's own
  // (no bucket views to clear and add into every step; gradient_buckets.h).
  // On the CPU they stay bucket views, so that a lone rank steps exactly as
  // each of N ranks does (a parameter without a gradient still decays).
  bool onCuda = false;
  for (const auto& p : model_.parameters()) {
    onCuda = p.is_cuda();
    break;
  }
  bindGradients_ = size_ > 1 || !onCuda;
  buckets_ = std::make_unique<GradientBuckets>(model_, bindGradients_);
  const bool partitioned = options_.partition && size_ > 1;
  const bool compressed = options_.compression != GradientCompression::kNone;
  BIGBATCH_REQUIRE(!(compressed && options_.partition), InvalidArgument,
                   "ddp.compression = powersgd compresses whole gradient matrices, which "
                   "ddp.partition = optimizer reduce-scatters in slices: set ddp.partition = none, "
                   "or ddp.compression = none");
  onDevice_ = !buckets_->empty() && !buckets_->device().is_cpu();
  const bool onNccl = size_ > 1 && options_.nccl != nullptr;
  BIGBATCH_REQUIRE(!onNccl || (onDevice_ && options_.ncclStream &&
                               options_.ncclStream->device() == buckets_->device()),
                   InvalidArgument,
                   "the NCCL exchange needs the model on the GPU of its stream (model on {}); "
                   "move the model first, or leave DdpOptions::nccl null",
                   buckets_->empty() ? std::string("none") : buckets_->device().str());
  BIGBATCH_REQUIRE(!(partitioned && onNccl), InvalidArgument,
                   "ddp.partition = optimizer reduce-scatters through the host collectives (its "
                   "slices and their optimizer live in host memory), not NCCL: set "
                   "ddp.gpu_exchange = \"host\" (or \"auto\"), or ddp.partition = none");
  if (onNccl) {
    deviceCodec_ = makeDeviceCodec(options_, buckets_->params(), buckets_->names(), size_,
                                   buckets_->device());
  } else {
    codec_ = makeGradientCodec(options_, buckets_->params(), buckets_->names(), size_);
  }
  if (partitioned) {
    wire_ = std::make_unique<ReduceScatterWire>(job_.communicator());
  } else {
    wire_ = std::make_unique<AllreduceWire>(job_.communicator(), *allreduce_);
  }
  size_t fusion = options_.fusionBytes;
  if (fusion == 0) {
    fusion = size_t{1} << 20;
    // One rank exchanges nothing; a partitioned run's slices (and its
    // optimizer) would have to be rebuilt at each re-layout.
    if (size_ > 1 && !partitioned) {
      tuner_ = std::make_unique<FusionTuner>(buckets_->numels(), options_.tuneSteps);
      fusion = tuner_->first();
    }
  }
  layoutFor(fusion, partitioned);
  if (bindGradients_) buckets_->installHooks([this](size_t param) { markReady(param); });
}

DistributedDataParallel::~DistributedDataParallel() {
  try {
    job_.thread().waitAll();  // no task of this exchange may outlive it
  } catch (...) {
  }
}

const std::vector<Bucket>& DistributedDataParallel::buckets() const { return buckets_->layout(); }
size_t DistributedDataParallel::fusionBytes() const { return buckets_->fusionBytes(); }
bool DistributedDataParallel::fusionSettled() const { return !tuner_ || tuner_->settled(); }
const std::vector<std::string>& DistributedDataParallel::parameterNames() const {
  return buckets_->names();
}

void DistributedDataParallel::layoutFor(size_t fusionBytes, bool partition) {
  BIGBATCH_CHECK(!partition_, Error,
                 "a partitioned exchange is laid out once (its optimizer holds the slices)");
  reducer_.reset();
  staging_.reset();
  buckets_->layoutFor(fusionBytes);
  // Buckets in device memory reach the host collectives through mirrors.
  const bool staged = size_ > 1 && options_.nccl == nullptr && (options_.stageThroughHost || onDevice_);
  if (staged) staging_ = std::make_unique<DeviceStaging>(buckets_->buffers());
  if (partition) {
    partition_ = std::make_unique<PartitionedExchange>(job_, *buckets_, staging_.get(),
                                                       options_.onExchange);
  }
  reducer_ = makeReducer();  // staged and partitioned: it keeps the sums in the mirrors
}

std::unique_ptr<BucketReducer> DistributedDataParallel::makeReducer() {
  if (size_ > 1 && options_.nccl != nullptr) {
    return std::make_unique<NcclReducer>(job_, *buckets_, *options_.nccl, *options_.ncclStream,
                                         *deviceCodec_);
  }
  if (staging_) {
    std::function<void(size_t)> afterSum;  // default: the sum back to the device
    if (partition_) afterSum = [p = partition_.get()](size_t b) { p->weightsToHost(b); };
    return std::make_unique<StagedReducer>(job_, *buckets_, *codec_, *wire_, options_.onExchange,
                                           *staging_, std::move(afterSum));
  }
  return std::make_unique<HostReducer>(job_, *buckets_, *codec_, *wire_, options_.onExchange);
}

int64_t DistributedDataParallel::wireBytesPerStep() const {
  if (size_ == 1) return 0;
  int64_t bytes = 0;
  for (const Bucket& b : buckets_->layout()) bytes += codec().wireBytes(b);
  return bytes;
}

int64_t DistributedDataParallel::fp32BytesPerStep() const {
  int64_t elements = 0;
  for (const Bucket& b : buckets_->layout()) elements += b.numel;
  return size_ > 1 ? elements * 4 : 0;
}

const BucketCodec& DistributedDataParallel::codec() const {
  if (deviceCodec_) return *deviceCodec_;
  return *codec_;
}

BucketCodec& DistributedDataParallel::codec() {
  if (deviceCodec_) return *deviceCodec_;
  return *codec_;
}

DistributedDataParallel::NamedState DistributedDataParallel::codecState() const {
  return codec().state();
}

void DistributedDataParallel::loadCodecState(const NamedState& state) { codec().loadState(state); }

void DistributedDataParallel::rescaleCodecState(double factor) {
  if (factor != 1.0) codec().rescale(factor);
}

void DistributedDataParallel::verifyIdentical() {
  std::vector<std::string> names;
  std::vector<int64_t> sums;
  for (const auto& item : model_.named_parameters()) {
    names.push_back(item.key());
    sums.push_back(tensorChecksum(item.value()));
  }
  for (const auto& item : model_.named_buffers()) {
    names.push_back(item.key());
    sums.push_back(tensorChecksum(item.value()));
  }
  // The bucket layout is part of the contract (fusion_bytes may differ).
  const std::vector<Bucket>& layout = buckets_->layout();
  torch::Tensor t = torch::empty({static_cast<int64_t>(layout.size()) + 1}, torch::kInt64);
  t[0] = static_cast<int64_t>(buckets_->fusionBytes()) * 8 +
         static_cast<int64_t>(options_.exchangeType);
  for (size_t b = 0; b < layout.size(); ++b) t[b + 1] = layout[b].numel;
  names.push_back("<gradient bucket layout (ddp.fusion_bytes, ddp.exchange_dtype)>");
  sums.push_back(tensorChecksum(t));
  job_.verifyIdentical(names, sums);
}

void DistributedDataParallel::zeroGrad() {
  job_.thread().waitAll();  // no exchange may still read the buffers
  if (relayoutTo_ != 0) {
    layoutFor(relayoutTo_, /*partition=*/false);  // autotuning's next candidate, or its choice
    relayoutTo_ = 0;
  }
  buckets_->zero();
}

void DistributedDataParallel::beginBackward(bool sync) {
  sync_ = sync && size_ > 1;
  if (sync_) syncStart_ = std::chrono::steady_clock::now();
  buckets_->beginSync();
}

void DistributedDataParallel::markReady(size_t param) {
  if (!sync_ || !buckets_->markReady(param) || !options_.overlap) return;
  // The last bucket fills at the very end of backward: finishBackward()
  // exchanges it (see HostReducer).
  size_t bucket;
  while (buckets_->nextComplete(bucket, /*keepLast=*/true)) reducer_->ready(bucket);
}

double DistributedDataParallel::finishBackward() {
  if (!sync_) return 0;
  // Buckets not handed over yet — the last one, and any whose parameters
  // took no part in this backward (their zero gradients are exchanged too:
  // every rank must reduce every bucket) — go now, in order.
  const double waited = reducer_->finish(buckets_->firstNotHandedOut());
  buckets_->handOutAll();
  sync_ = false;
  if (tuner_ && !tuner_->settled()) {
    const double step =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - syncStart_).count();
    if (const size_t next = tuner_->afterStep(step, buckets_->fusionBytes(), job_)) relayoutTo_ = next;
  }
  return waited;
}

void DistributedDataParallel::gatherWeights() {
  if (partition_) partition_->gatherWeights();
}

double DistributedDataParallel::waitWeights() { return partition_ ? partition_->waitWeights() : 0; }

const std::vector<ParameterShard>& DistributedDataParallel::shards() const {
  static const std::vector<ParameterShard> none;
  return partition_ ? partition_->shards() : none;
}

std::vector<torch::Tensor> DistributedDataParallel::gatherShards(
    const std::vector<torch::Tensor>& mine) {
  BIGBATCH_REQUIRE(partition_ != nullptr, InvalidArgument,
                   "gatherShards: {} slices given, this rank holds 0 (the exchange is not "
                   "partitioned)",
                   mine.size());
  return partition_->gatherShards(mine);
}

std::map<std::string, double> DistributedDataParallel::allreduceTuning() const {
  auto* tuned = dynamic_cast<AutoAllreduce*>(allreduce_.get());
  std::map<std::string, double> state =
      tuned ? tuned->tuningState(job_.communicator()) : std::map<std::string, double>{};
  // The fusion autotuning's choice (not a half-done tuning: a resume from
  // inside it tunes again).
  if (tuner_ && tuner_->settled()) {
    state["fusion_tuning.bytes"] =
        static_cast<double>(relayoutTo_ != 0 ? relayoutTo_ : buckets_->fusionBytes());
  }
  return state;
}

std::vector<std::string> DistributedDataParallel::allreduceChoices() const {
  std::vector<std::string> out;
  auto* tuned = dynamic_cast<AutoAllreduce*>(allreduce_.get());
  if (!tuned) return out;
  static const char* const kCandidates[3] = {"table", "ring", "mpi"};
  for (const auto& c : tuned->tunedChoices(job_.communicator())) {
    std::string timed;
    for (int i = 0; i < 3; ++i) {
      if (c.seconds[i] <= 0) continue;
      timed += fmt::format("{}{} {:.1f} us", timed.empty() ? "" : "; ", kCandidates[i],
                           c.seconds[i] * 1e6);
    }
    out.push_back(fmt::format("{}..{} B: {} ({})", c.fromBytes, c.toBytes, c.algorithm, timed));
  }
  return out;
}

void DistributedDataParallel::restoreAllreduceTuning(const std::map<std::string, double>& state) {
  if (auto* tuned = dynamic_cast<AutoAllreduce*>(allreduce_.get())) {
    tuned->restoreTuning(job_.communicator(), state);
  }
  const auto fusion = state.find("fusion_tuning.bytes");
  if (fusion != state.end() && tuner_ && fusion->second >= 4) {
    tuner_->restore();
    const auto bytes = static_cast<size_t>(fusion->second);
    if (bytes != buckets_->fusionBytes()) relayoutTo_ = bytes;  // at the first zeroGrad()
  }
}

}  // namespace bigbatch
