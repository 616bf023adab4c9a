#include "bigbatch/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <fstream>

#include "training_run.h"

namespace bigbatch {
namespace train_detail {
namespace {

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

void toChannelsLast(torch::nn::Module& model) {
  torch::NoGradGuard noGrad;
  for (auto& p : model.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

// How many ranks of this host (this one included) may run on exactly these
// CPUs: all of them when nothing binds them, one each when they are pinned.
int ranksSharing(Communicator& comm, const std::vector<int>& cpus) {
  if (comm.size() == 1) return 1;
  Communicator& host = comm.hostComm();
  const int64_t mine = static_cast<int64_t>(fnv1a64(cpus.data(), cpus.size() * sizeof(int)));
  std::vector<int64_t> masks(static_cast<size_t>(host.size()));
  masks[static_cast<size_t>(host.rank())] = mine;
  allgather(host, masks.data(), masks.size(), DataType::kInt64);
  return static_cast<int>(std::count(masks.begin(), masks.end(), mine));
}

}  // namespace

TrainingRun::TrainingRun(const Config& config, const TrainOptions& options, TrainingJob job)
    : config_(config), options_(options), initStart_(Clock::now()) {
  // MLPerf timing: init_start .. init_stop covers set-up; the score is
  // run_stop - run_start, and run_start comes right after init_stop.
  start_ = startRun(config_, options_, ml_);
  comm_ = start_.comm;
  device_ = start_.device;
  makeCurrent(device_);  // this thread's tensors and streams go to this rank's GPU
  rank_ = start_.rank;
  worldSize_ = start_.worldSize;
  lead_ = rank_ == 0;
  quiet_ = options_.verbosity == Verbosity::kQuiet || !lead_;
  if (!quiet_) announceResume(start_, config_, options_);
  recipe_ = resolveRecipe(config_, worldSize_);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kCacheClear, true);
  BIGBATCH_MLLOG_START(ml_, mlkey::kInitStart);

  resolveThreads();
  loadData(job);
  prepareModel(job);
  prepareExchange();
  restoreOrVerify();
  prepareOptimizer();
  logRecipe();
  printBanner();
}

// Intra-op threads: run.threads, or this rank's share of the CPUs it may
// run on — all of them when a launcher pinned it, else split among the
// host's ranks that share them. A rank allowed fewer CPUs than it has
// threads is warned: its threads would take turns (collective).
void TrainingRun::resolveThreads() {
  const std::vector<int> cpus = allowedCpus();
  const int64_t allowed = std::max<int64_t>(1, static_cast<int64_t>(cpus.size()));
  threads_ = recipe_.threads;
  if (threads_ == 0) threads_ = std::max<int64_t>(1, allowed / ranksSharing(*comm_, cpus));
  if (threads_ > allowed) {
    log().warn(
        "{} thread(s) on {} allowed CPU(s) ({}): the threads take turns; bind each rank to as "
        "many CPUs as threads (bigbatch --workers does) or lower run.threads",
        threads_, allowed, formatCpuList(cpus));
  }
  int64_t fewest = -allowed;
  if (worldSize_ > 1) allreduceMaxInt64(*comm_, &fewest, 1, /*tag=*/0x7e11);
  allowedCpus_ = -fewest;
  torch::set_num_threads(static_cast<int>(threads_));
}

void TrainingRun::loadData(TrainingJob& job) {
  data_ = openTrainingData(recipe_.data, std::move(job.trainData), std::move(job.testData));
}

// Every rank builds the model from the same seed: no broadcast (the
// checksum in restoreOrVerify() proves the ranks agree).
void TrainingRun::prepareModel(TrainingJob& job) {
  if (!job.model) {
    torch::manual_seed(recipe_.seed);
    job.model = buildModel(modelOptions(recipe_, data_.channels, data_.numClasses));
  }
  model_ = job.model;
  if (!options_.initFrom.empty() && !start_.resume) {
    loadStateDict(*model_, options_.initFrom);  // every rank: the checksum still holds
    log().info("initial weights from {}", options_.initFrom);
  }
  // Built and seeded on the CPU, then moved: the same initial weights on
  // every device and in both builds.
  model_->to(device_.device);
  if (recipe_.channelsLast) toChannelsLast(*model_);
  model_->train();
}

// The gradient exchange, the timeline that records it, and the stall guard:
// each rank's step and phase in shared memory, and under MPI a watchdog
// that ends a stalled job naming the rank that stopped (collective).
void TrainingRun::prepareExchange() {
  if (!options_.timelinePath.empty()) {
    timeline_ =
        std::make_unique<Timeline>(rank_, options_.timelineFirstStep, options_.timelineLastStep);
  }
  DdpOptions ddpOptions = recipe_.ddp;
  ddpOptions.stageThroughHost = ddpOptions.stageThroughHost || options_.stageThroughHost;
  if (timeline_) {
    Timeline* tl = timeline_.get();
    ddpOptions.onExchange = [tl](size_t bucket, size_t bytes, Clock::time_point start,
                                 Clock::time_point end, bool inlined) {
      if (tl->active()) {
        tl->record("allreduce", Timeline::kCommThread, start, end,
                   fmt::format(R"("bucket":{},"bytes":{},"on_compute_thread":{})", bucket, bytes,
                               inlined ? "true" : "false"));
      }
    };
  }
  stallGuard_ =
      std::make_unique<StallGuard>(*comm_, recipe_.timeoutS, [this] { logRunStop("aborted"); });
  nccl_ = connectGpuExchange(*comm_, device_, recipe_.gpuExchange, recipe_.timeoutS,
                             ddpOptions.partition);
  if (nccl_) {
    ddpOptions.nccl = nccl_->comm.get();
    ddpOptions.ncclStream = nccl_->stream;
  }
  job_ = std::make_unique<JobCollectives>(*comm_, stallGuard_->watchdog());
  ddp_ = std::make_unique<DistributedDataParallel>(*model_, *job_, ddpOptions);
  if (worldSize_ > 1) {
    for (const auto& b : ddp_->buckets()) {
      exchangeBytes_ += b.numel * static_cast<int64_t>(elementSize(ddpOptions.exchangeType));
    }
  }
}

// On a resume: the weights and rank 0's buffers on every rank first, so the
// checksum proves every rank read the same checkpoint; then each rank's own
// BatchNorm statistics and RNG state, and the run's position and totals.
void TrainingRun::restoreOrVerify() {
  const std::optional<ResumePoint>& resume = start_.resume;
  if (!resume) {
    ddp_->verifyIdentical();
    return;
  }
  const Checkpoint& k = resume->checkpoint;
  restoreModel(*model_, k.parameters, k.rankBuffers[0], resume->path);
  ddp_->verifyIdentical();
  const size_t mine = static_cast<size_t>(rank_) % k.rankBuffers.size();
  restoreModel(*model_, {}, k.rankBuffers[mine], resume->path);
  torch::NoGradGuard noGrad;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(k.rankRng[mine]);
  // The algorithms the interrupted run's tuning chose, on the same ranks.
  if (k.worldSize == worldSize_) ddp_->restoreAllreduceTuning(k.counters);
  state_ = RunState::fromCheckpoint(k, lead_);
  elapsedBefore_ = state_.elapsedS;
}

// The optimizer (K-FAC under it if asked), the schedules, the loss scaler
// and the training input; a resume restores their state.
void TrainingRun::prepareOptimizer() {
  optimizer_ = makeRunOptimizer(*model_, *ddp_, recipe_.optimizer);
  if (recipe_.kfac) kfacCoverage_ = optimizer_->enableKfac(*recipe_.kfac);
  if (start_.resume) {
    loadWholeOptimizerState(*optimizer_, *ddp_, start_.resume->checkpoint.optimizer);
  }
  lrSchedule_ = std::make_unique<LrSchedule>(recipe_.lr);
  momentumSchedule_ = std::make_unique<PiecewiseLinear>(
      recipe_.momentumEpochs, recipe_.momentumValues, recipe_.momentum, "momentum schedule");
  batchSchedule_ = std::make_unique<BatchSchedule>(recipe_.batchSchedule);
  // Mixed precision: 16-bit compute on copies of the fp32 masters, and the
  // loss scaler that keeps small gradients alive in fp16 (amp/).
  checkPrecisionSupported(recipe_.precision, device_.device.type());
  if (recipe_.lossScaler) {
    scaler_.emplace(*recipe_.lossScaler);
    if (state_.lossScale) scaler_->loadState(*state_.lossScale);
  }
  // Training batches come from the input pipeline (data/input_pipeline.h):
  // inline by default (a 28x28 batch costs less than a thread hand-off while
  // every core trains), or with threads per stage that prepare the next
  // micro-batches while this one trains.
  trainSource_ = data_.train;
  augment_ = data_.trainAugment;
  pipelineOptions_ = pipelineOptionsFor(recipe_, recipe_.channelsLast && data_.channels > 1);
  pipelineOptions_.pinMemory = device_.device.is_cuda();  // batches assembled where H2D starts
  if (recipe_.cacheMb > 0) {
    cache_ = std::make_shared<DecodedCache>(trainSource_->size(), recipe_.cacheMb << 20);
  }
  // Checkpoints: rank 0 writes; every rank sends its BatchNorm buffers and
  // RNG state (they differ per rank) and takes part in the totals.
  const std::string dir =
      recipe_.ckpt.dir.empty() && lead_ ? start_.runDir->file("checkpoints") : recipe_.ckpt.dir;
  checkpointer_ =
      std::make_unique<RunCheckpointer>(*model_, *ddp_, *job_, *optimizer_, config_, lead_, dir,
                                        recipe_.ckpt.keep, worldSize_, recipe_.globalBatch);
  StepSettings stepSettings = recipe_.step;
  stepSettings.device = device_.device;
  step_ = std::make_unique<TrainStep>(*model_, *ddp_, *job_, *optimizer_,
                                      scaler_ ? &*scaler_ : nullptr, *stallGuard_, timeline_.get(),
                                      rank_, stepSettings);
}

void TrainingRun::logRecipe() {
  const MlperfSubmission& m = recipe_.mlperf;
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kSubmissionBenchmark, m.benchmark);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kSubmissionOrg, m.org);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kSubmissionDivision, m.division);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kSubmissionStatus, m.status);
  BIGBATCH_MLLOG_POINT(
      ml_, mlkey::kSubmissionPlatform,
      m.platform.empty() ? fmt::format("{}x{}", worldSize_, cpuModel()) : m.platform);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kSeed, recipe_.seed);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kGlobalBatchSize, recipe_.globalBatch);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kGradientAccumulationSteps, recipe_.accumulation);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kTrainSamples, data_.train->size());
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kEvalSamples, data_.test->size());
  logOptimizer(ml_, recipe_, decaySteps());
  BIGBATCH_MLLOG_POINT(ml_, "model_bn_span",
                       std::max<int64_t>(1, recipe_.batchPerRank / recipe_.step.groups));
}

// The optimizer steps after warmup in the epoch budget (MLPerf's
// *_learning_rate_decay_steps), counted epoch by epoch: under a batch-size
// schedule an epoch has fewer, larger steps.
int64_t TrainingRun::decaySteps() const {
  double total = 0, warmup = 0;
  for (int64_t epoch = 1; epoch <= recipe_.epochs; ++epoch) {
    const int64_t batch = recipe_.globalBatch * batchSchedule_->factor(epoch);
    const double steps = static_cast<double>((data_.train->size() + batch - 1) / batch);
    const double warm = recipe_.lr.warmupEpochs - static_cast<double>(epoch - 1);
    total += steps;
    warmup += steps * std::clamp(warm, 0.0, 1.0);
  }
  return static_cast<int64_t>(std::llround(total - warmup));
}

void TrainingRun::printBanner() const {
  if (quiet_) return;
  fmt::print(
      "bigbatch: {} ({} parameters), {}, global batch {} = {} "
      "rank(s) x {} x {} accumulation step(s), BN groups of {}, {} thread(s) per rank, "
      "{} gradient bucket(s), {} peak lr {:.4g}, {} compute, {} on the wire{}\n"
      "  device: {}{}; run directory: {}\n",
      recipe_.modelName, countParameters(*model_), data_.description, recipe_.globalBatch,
      worldSize_, recipe_.batchPerRank, recipe_.accumulation,
      std::max<int64_t>(1, recipe_.batchPerRank / recipe_.step.groups), threads_,
      ddp_->buckets().size(),
      recipe_.optimizer.name + (optimizer_->kfac() ? " on K-FAC directions" : ""), recipe_.peakLr,
      precisionName(recipe_.precision), recipe_.exchangeDtype,
      scaler_ ? fmt::format(", dynamic loss scale from {:g}", scaler_->scale()) : "",
      device_.description,
      nccl_ ? fmt::format("; gradients summed by NCCL {} on the GPUs", NcclCommunicator::version())
      : device_.device.is_cuda() && ddp_->partitioned()
          ? "; gradients reduce-scattered through host memory, the optimizer on host slices"
      : device_.device.is_cuda() && worldSize_ > 1 ? "; gradients summed through host memory"
                                                   : "",
      start_.runDir->path());
  if (kfacCoverage_) {
    const KfacCoverage& k = *kfacCoverage_;
    fmt::print(
        "  K-FAC on {} conv/linear layer(s){}: {:.2f} M values of factor statistics "
        "({:.1f} MB) summed over the ranks every step\n",
        k.layers,
        k.tooLarge ? fmt::format(" ({} more, with a factor over optim.kfac_max_dim = {}, keep "
                                 "their plain gradient; the largest is '{}')",
                                 k.tooLarge, recipe_.kfac->maxDim, k.largestSkipped)
                   : std::string(),
        static_cast<double>(k.statisticValues) / 1e6,
        static_cast<double>(k.statisticValues) * 8 / 1e6);
  }
  std::fflush(stdout);
}

}  // namespace train_detail

TrainResult train(const Config& config, const TrainOptions& options, TrainingJob job) {
  validateTrainingConfig(config);
  train_detail::TrainingRun run(config, options, std::move(job));
  return run.run();
}

}  // namespace bigbatch
