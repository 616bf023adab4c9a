#include "bigbatch/train/trainer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/amp/precision.h"
#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/collectives/collectives.h"
#include "bigbatch/common/cpu_affinity.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/hash.h"
#include "bigbatch/common/mlperf_logger.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/input_pipeline.h"
#include "bigbatch/data/sampler.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/optim/optimizer.h"
#include "bigbatch/schedule/batch_schedule.h"
#include "bigbatch/schedule/lr_schedule.h"
#include "bigbatch/schedule/piecewise_linear.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/train/partitioned_state.h"
#include "bigbatch/train/progress.h"
#include "bigbatch/train/timeline.h"
#include "evaluation.h"
#include "gpu_exchange.h"
#include "model_state.h"
#include "recipe.h"
#include "run_checkpointer.h"
#include "run_report.h"
#include "run_start.h"
#include "run_state.h"
#include "stall_guard.h"
#include "train_step.h"

namespace bigbatch {
namespace {

using namespace train_detail;

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

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

// This rank's micro-batches of an epoch from step `firstStep` on, in
// training order: each step's shard cut into `accumulation` parts.
std::vector<std::vector<int64_t>> microBatches(const ShardPlan& plan, int64_t firstStep,
                                               int64_t accumulation) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t s = firstStep; s < plan.steps; ++s) {
    const std::vector<int64_t>& shard = plan.batches[s];
    const int64_t n = static_cast<int64_t>(shard.size());
    for (int64_t a = 0; a < accumulation; ++a) {
      out.emplace_back(shard.begin() + n * a / accumulation,
                       shard.begin() + n * (a + 1) / accumulation);
    }
  }
  return out;
}

// What one epoch's steps leave behind on this rank.
struct EpochSteps {
  int64_t globalBatch = 0;  // under the batch-size schedule
  StepTimes times;          // this rank's step-time breakdown
  double trainS = 0;        // wall time of the steps
  double lr = 0;            // of the last step
  double momentum = 0;
};

// One training run on one rank. The constructor is the set-up (MLPerf
// init_start .. init_stop: ranks, data, model, exchange, optimizer, the
// restore of a resume); run() is the run (run_start .. run_stop): epochs of
// steps, evaluation, records and checkpoints, then the run's files.
//
// The run's position and totals live in one RunState, which every
// checkpoint snapshots and a resume restores; everything the run reads
// from its config was resolved once into `recipe_`.
class TrainingRun {
 public:
  TrainingRun(const Config& config, const TrainOptions& options, TrainingJob job);
  TrainResult run();

 private:
  // Set-up, in this order.
  void resolveThreads();
  void loadData(TrainingJob& job);
  void prepareModel(TrainingJob& job);
  void prepareExchange();
  void restoreOrVerify();
  void prepareOptimizer();
  void logRecipe();
  void printBanner() const;

  // The epoch loop's parts.
  EpochSteps trainEpoch();
  void trainOneStep(DeviceFeed& feed, int64_t stepsInEpoch, EpochSteps& e);
  void checkpointMidEpoch(int64_t stepsInEpoch);
  // Top-1 and top-5 test accuracy on evaluation epochs.
  std::optional<std::pair<double, double>> evaluateIfDue(double& evalS);
  EpochRecord closeEpoch(const EpochSteps& e);
  bool stopOrCheckpoint(const EpochRecord& record);
  TrainResult finish();
  double elapsedNow() const { return elapsedBefore_ + secondsSince(runStart_); }
  int64_t decaySteps() const;
  void agreeOnBatchNormStatistics(std::vector<torch::Tensor>& own);
  // A failing run tells the other ranks and closes its MLPerf log.
  void abortRun(const std::string& message);
  // run_stop, once (the stall watchdog may write it from its thread).
  void logRunStop(const char* status);

  Config config_;  // a resume on another world size adjusts the accumulation steps
  const TrainOptions& options_;
  const Clock::time_point initStart_;
  Clock::time_point runStart_;
  double initSeconds_ = 0;
  MlperfLogger ml_;  // stays closed (silent) on ranks other than 0
  RunStart start_;
  RunDevice device_;  // run.device
  Communicator* comm_ = nullptr;
  int rank_ = 0, worldSize_ = 1;
  bool lead_ = true, quiet_ = false;
  RunRecipe recipe_;
  int64_t threads_ = 1;
  int64_t allowedCpus_ = 1;  // the fewest CPUs any rank may run on

  TrainingData data_;
  std::shared_ptr<ImageClassifierImpl> model_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<StallGuard> stallGuard_;
  std::unique_ptr<NcclLink> nccl_;  // ddp.gpu_exchange = NCCL; outlives ddp_
  std::unique_ptr<DistributedDataParallel> ddp_;
  int64_t exchangeBytes_ = 0;  // gradient bytes each rank hands to the allreduce per step
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<KfacCoverage> kfacCoverage_;  // with optim.kfac

  std::optional<DynamicLossScaler> scaler_;
  std::unique_ptr<LrSchedule> lrSchedule_;
  std::unique_ptr<PiecewiseLinear> momentumSchedule_;
  std::unique_ptr<BatchSchedule> batchSchedule_;
  std::shared_ptr<const ImageSource> trainSource_;
  std::shared_ptr<DecodedCache> cache_;  // data.cache_mb
  ImageAugment augment_;
  PipelineOptions pipelineOptions_;
  std::unique_ptr<RunCheckpointer> checkpointer_;
  std::unique_ptr<TrainStep> step_;
  Progress progress_{false};

  RunState state_;
  double elapsedBefore_ = 0;  // run seconds of the sessions before a resume
  bool paused_ = false;       // train.stop_after_epoch ended this invocation
  std::atomic<bool> runStarted_{false}, runStopped_{false};
};

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
    job.model = buildModel(modelOptions(config_, data_.channels, data_.numClasses));
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
  ddpOptions.watchdog = stallGuard_->watchdog();
  nccl_ = connectGpuExchange(*comm_, device_, recipe_.gpuExchange, recipe_.timeoutS);
  if (nccl_) {
    ddpOptions.nccl = nccl_->comm.get();
    ddpOptions.ncclStream = nccl_->stream;
  }
  ddp_ = std::make_unique<DistributedDataParallel>(*model_, *comm_, ddpOptions);
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
  pipelineOptions_ = pipelineOptionsFor(config_, recipe_.channelsLast && data_.channels > 1);
  pipelineOptions_.pinMemory = device_.device.is_cuda();  // batches assembled where H2D starts
  if (recipe_.cacheMb > 0) {
    cache_ = std::make_shared<DecodedCache>(trainSource_->size(), recipe_.cacheMb << 20);
  }
  // Checkpoints: rank 0 writes; every rank sends its BatchNorm buffers and
  // RNG state (they differ per rank) and takes part in the totals.
  const std::string dir =
      recipe_.ckpt.dir.empty() && lead_ ? start_.runDir->file("checkpoints") : recipe_.ckpt.dir;
  checkpointer_ =
      std::make_unique<RunCheckpointer>(*model_, *ddp_, *optimizer_, config_, lead_, dir,
                                        recipe_.ckpt.keep, worldSize_, recipe_.globalBatch);
  StepSettings stepSettings = recipe_.step;
  stepSettings.device = device_.device;
  step_ = std::make_unique<TrainStep>(*model_, *ddp_, *optimizer_, scaler_ ? &*scaler_ : nullptr,
                                      *stallGuard_, timeline_.get(), rank_, stepSettings);
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

TrainResult TrainingRun::run() {
  // train.stop_after_epoch on a resume: the checkpoint of that very pause
  // (its invocation ended before its caller saw it) trains nothing and
  // reports the pause again; one past it is refused.
  const int64_t stopAfter = recipe_.stopAfterEpoch;
  const bool atPause = stopAfter > 0 && stopAfter < recipe_.epochs &&
                       state_.epoch == stopAfter + 1 && state_.stepInEpoch == 0;
  BIGBATCH_REQUIRE(stopAfter == 0 || atPause || state_.epoch <= stopAfter, InvalidArgument,
                   "train.stop_after_epoch = {}, but the resumed checkpoint is past it (at epoch "
                   "{}); give a later epoch, or 0 to run the whole budget",
                   stopAfter, state_.epoch);
  paused_ = atPause;
  BIGBATCH_MLLOG_END(ml_, mlkey::kInitStop);
  BIGBATCH_MLLOG_START(ml_, mlkey::kRunStart);
  runStart_ = Clock::now();
  runStarted_ = true;
  initSeconds_ = std::chrono::duration<double>(runStart_ - initStart_).count();
  progress_ = Progress(!quiet_);
  // A run that fails part-way still closes its MLPerf log (status aborted).
  try {
    while (state_.epoch <= recipe_.epochs && !paused_) {
      BIGBATCH_MLLOG_START(ml_, mlkey::kBlockStart,
                           {{"first_epoch_num", state_.epoch}, {"epoch_count", 1}});
      BIGBATCH_MLLOG_START(ml_, mlkey::kEpochStart, {{"epoch_num", state_.epoch}});
      const EpochSteps steps = trainEpoch();
      const EpochRecord record = closeEpoch(steps);
      if (stopOrCheckpoint(record)) break;
    }
  } catch (const TimeoutError& e) {
    // A peer did not answer in time: the heartbeat tells which rank stalled.
    const TimeoutError named(fmt::format("{}; {}", e.what(), stallGuard_->diagnose()));
    abortRun(named.what());
    throw named;
  } catch (const std::exception& e) {
    abortRun(e.what());
    throw;
  }
  return finish();
}

void TrainingRun::abortRun(const std::string& message) {
  // Tell the other ranks, so they fail now instead of at their deadline —
  // from the communication thread, which may still be inside MPI.
  ddp_->postError(message);
  logRunStop("aborted");
}

void TrainingRun::logRunStop(const char* status) {
  if (!runStarted_ || runStopped_.exchange(true)) return;
  BIGBATCH_MLLOG_END(ml_, mlkey::kRunStop, {{"status", status}});
}

// The epoch's steps, from where a resume left off, with the mid-epoch
// checkpoints. The batch-size schedule grows each rank's micro-batch.
EpochSteps TrainingRun::trainEpoch() {
  const int64_t epoch = state_.epoch;
  EpochSteps e;
  e.globalBatch = recipe_.globalBatch * batchSchedule_->factor(epoch);
  const ShardPlan plan =
      planEpoch(trainSource_->size(), e.globalBatch, rank_, worldSize_, recipe_.seed, epoch);
  InputPipeline pipeline(trainSource_, augment_, pipelineOptions_, recipe_.seed, epoch,
                         microBatches(plan, state_.stepInEpoch, recipe_.accumulation), cache_);
  DeviceFeed feed(pipeline, device_.device);
  progress_.startEpoch(epoch, recipe_.epochs, plan.steps);
  const auto start = Clock::now();
  while (state_.stepInEpoch < plan.steps) {
    trainOneStep(feed, plan.steps, e);
    checkpointMidEpoch(plan.steps);
  }
  progress_.finishEpoch();
  e.trainS = secondsSince(start);
  BIGBATCH_MLLOG_END(ml_, mlkey::kEpochStop, {{"epoch_num", epoch}});
  return e;
}

void TrainingRun::trainOneStep(DeviceFeed& feed, int64_t stepsInEpoch, EpochSteps& e) {
  RunState& s = state_;
  // Images in this global batch (the last one of an epoch may be short).
  const int64_t samples =
      std::min(e.globalBatch, trainSource_->size() - s.stepInEpoch * e.globalBatch);
  const double position = static_cast<double>(s.epoch - 1) +
                          static_cast<double>(s.stepInEpoch) / static_cast<double>(stepsInEpoch);
  const double scheduled = lrSchedule_->at(position);
  e.lr = scheduled * batchSchedule_->lrMultiplier(s.epoch);
  e.momentum = momentumSchedule_->at(position);
  const double decayScale =
      recipe_.decayFollowsLr && recipe_.peakLr > 0 ? scheduled / recipe_.peakLr : 1.0;
  const StepOutcome stepped =
      step_->run(feed, {s.epoch, s.stepInEpoch + 1, s.globalStep + 1, samples},
                 {e.lr, e.momentum, decayScale}, e.times, s.epochTally);
  if (!stepped.applied) ++s.epochSkipped;
  ++s.stepInEpoch;
  ++s.globalStep;
  if (options_.onStep) {
    const double global = ddp_->allreduceSum({stepped.lossSum})[0];
    // A skipped step reports NaN: its loss did not move the weights.
    options_.onStep({s.epoch, s.globalStep,
                     stepped.applied ? global / static_cast<double>(samples)
                                     : std::numeric_limits<double>::quiet_NaN(),
                     samples, e.lr});
  }
  // Rank 0's view: its own loss, every rank's images (same shard sizes).
  progress_.update(s.stepInEpoch, static_cast<int64_t>(s.epochTally.seen) * worldSize_,
                   s.epochTally.lossSum / std::max(s.epochTally.seen, 1.0));
}

void TrainingRun::checkpointMidEpoch(int64_t stepsInEpoch) {
  const int64_t every = recipe_.ckpt.everySteps;
  if (every <= 0 || state_.globalStep % every != 0 || state_.stepInEpoch >= stepsInEpoch) return;
  state_.elapsedS = elapsedNow();
  if (scaler_) state_.lossScale = scaler_->state();
  checkpointer_->save(state_);
}

// Test accuracy, top-1 and top-5, on evaluation epochs (every
// train.eval_every, and the last), sharded over the ranks; `evalS` gets the
// seconds it took. In-memory data is evaluated as stored; CIFAR-10 and
// folders through the input pipeline with the validation crop.
std::optional<std::pair<double, double>> TrainingRun::evaluateIfDue(double& evalS) {
  const int64_t epoch = state_.epoch;
  if (epoch % recipe_.evalEvery != 0 && epoch != recipe_.epochs &&
      epoch != recipe_.stopAfterEpoch) {
    return std::nullopt;
  }
  BIGBATCH_MLLOG_START(ml_, mlkey::kEvalStart, {{"epoch_num", epoch}});
  const auto start = Clock::now();
  std::vector<torch::Tensor> own;
  agreeOnBatchNormStatistics(own);
  EvalSettings evalSettings;
  evalSettings.batch = recipe_.evalBatch;
  evalSettings.channelsLast = recipe_.channelsLast;
  evalSettings.precision = recipe_.precision;
  evalSettings.device = device_.device;
  evalSettings.rank = rank_;
  evalSettings.worldSize = worldSize_;
  evalSettings.flip = recipe_.evalFlip;
  const EvalCounts mine = data_.inMemory()
                              ? evaluateShard(*model_, data_.testSet, evalSettings)
                              : evaluateSourceShard(*model_, data_.test, data_.evalAugment,
                                                    pipelineOptions_, evalSettings);
  if (!own.empty()) restoreFloatBuffers(*model_, own);
  const auto sums = ddp_->allreduceSum({static_cast<double>(mine.top1),
                                        static_cast<double>(mine.top5),
                                        static_cast<double>(mine.samples)});
  BIGBATCH_REQUIRE(sums[2] > 0, IoError,
                   "no test sample could be evaluated (every one was skipped as unreadable)");
  const double top1 = sums[0] / sums[2], top5 = sums[1] / sums[2];
  evalS = secondsSince(start);
  if (timeline_ && timeline_->active()) {
    timeline_->record("evaluation", Timeline::kComputeThread, start, Clock::now(),
                      fmt::format(R"("epoch":{})", epoch));
  }
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kEvalAccuracy, top1, {{"epoch_num", epoch}, {"top5", top5}});
  BIGBATCH_MLLOG_END(ml_, mlkey::kEvalStop, {{"epoch_num", epoch}});
  state_.finalAccuracy = top1;
  state_.bestAccuracy = std::max(state_.bestAccuracy, top1);
  state_.finalTop5 = top5;
  state_.bestTop5 = std::max(state_.bestTop5, top5);
  return std::make_pair(top1, top5);
}

// Every rank evaluates its shard with the same BatchNorm statistics, the
// ones model.pt holds, so the accuracy reported is that of the saved model:
// by default their mean over the ranks, kept (averaging is linear in the
// running averages' updates, so training on from the mean is the mean of
// training on from each); with train.average_bn_stats = false rank 0's,
// each rank's own given back in `own` to restore after the evaluation.
void TrainingRun::agreeOnBatchNormStatistics(std::vector<torch::Tensor>& own) {
  if (worldSize_ == 1) return;
  if (recipe_.averageBnStats) {
    ddp_->averageBuffers();
    return;
  }
  own = floatBuffers(*model_);
  ddp_->broadcastBuffers(0);
}

// The epoch's totals over the ranks, its evaluation, and its record
// (metrics.csv row and terminal line).
EpochRecord TrainingRun::closeEpoch(const EpochSteps& e) {
  // The exposed wait per rank as min and max, since waiting for a slower
  // rank looks like communication.
  const StepTally& t = state_.epochTally;
  ddp_->waitWeights();  // partitioned: the last step's weights, before evaluating them
  const auto totals = ddp_->allreduceSum({t.lossSum, t.correct, t.seen});
  const auto waitMax = ddp_->allreduceMax({e.times.comm, e.trainS});
  const auto waitMin = ddp_->allreduceMin({e.times.comm});
  state_.trainSeconds += waitMax[1];
  state_.trainImages += static_cast<int64_t>(totals[2]);

  EpochRecord r;
  if (const auto acc = evaluateIfDue(r.evalS)) {
    r.testAcc = acc->first;
    r.testTop5 = acc->second;
  }
  BIGBATCH_MLLOG_END(ml_, mlkey::kBlockStop, {{"first_epoch_num", state_.epoch}});
  r.epoch = state_.epoch;
  r.step = state_.globalStep;
  r.lr = e.lr;
  r.momentum = e.momentum;
  r.trainLoss = totals[0] / totals[2];
  r.trainAcc = totals[1] / totals[2];
  r.epochTimeS = e.trainS;
  r.imgS = totals[2] / waitMax[1];
  r.elapsedS = elapsedNow();
  r.times = e.times;
  r.commWaitMinS = waitMin[0];
  r.commWaitMaxS = waitMax[0];
  r.globalBatch = e.globalBatch;
  r.skippedSteps = state_.epochSkipped;
  r.lossScale = scaler_ ? scaler_->scale() : 1.0;
  if (r.epoch == 1) state_.firstLoss = r.trainLoss;
  state_.lastLoss = r.trainLoss;
  state_.epochsDone = r.epoch;
  if (start_.runDir) start_.runDir->appendMetrics(metricsColumns(), metricsRow(r));
  if (!quiet_) printEpochLine(r, recipe_.epochs);
  return r;
}

// Whether the run stops after this epoch (the target reached, with
// train.stop_at_target); the epoch-end checkpoint when one is due.
bool TrainingRun::stopOrCheckpoint(const EpochRecord& record) {
  bool stop = false;
  const std::optional<double> metric = recipe_.targetTop5 ? record.testTop5 : record.testAcc;
  if (metric && *metric >= recipe_.targetAccuracy && !state_.reachedTarget) {
    state_.reachedTarget = true;
    state_.timeToTargetS = elapsedNow();
    stop = recipe_.stopAtTarget;
  }
  const int64_t epoch = state_.epoch;
  ++state_.epoch;
  state_.stepInEpoch = 0;
  state_.epochTally = {};
  state_.epochSkipped = 0;
  state_.elapsedS = record.elapsedS;
  if (scaler_) state_.lossScale = scaler_->state();
  // train.stop_after_epoch: a pause, checkpointed, that a resume continues.
  if (!stop && epoch == recipe_.stopAfterEpoch && epoch < recipe_.epochs) {
    paused_ = true;
    stop = true;
  }
  const int64_t every = recipe_.ckpt.everyEpochs;
  if (stop || epoch == recipe_.epochs || (every > 0 && epoch % every == 0)) {
    checkpointer_->save(state_);
  }
  return stop;
}

// After the last epoch: the timeline, run_stop, model.pt and summary.json.
TrainResult TrainingRun::finish() {
  if (timeline_) {
    // Rank 0 collects every rank's events into one file.
    const auto parts = ddp_->gatherToRoot(timeline_->eventsJson());
    if (lead_) {
      Timeline::write(options_.timelinePath, parts);
      if (!quiet_) {
        fmt::print("timeline ({} rank(s)) written to {}\n", parts.size(), options_.timelinePath);
      }
    }
  }
  TrainResult result;
  state_.copyTo(result);
  result.paused = paused_;
  result.targetAccuracy = recipe_.targetAccuracy;
  result.targetMetric = recipe_.targetTop5 ? "top5" : "top1";
  result.globalBatchSize = recipe_.globalBatch;
  result.worldSize = worldSize_;
  result.runDir = start_.runDir ? start_.runDir->path() : std::string();
  result.trainTimeS = elapsedNow();
  result.throughputImgS =
      state_.trainSeconds > 0 ? static_cast<double>(state_.trainImages) / state_.trainSeconds : 0;
  logRunStop(result.reachedTarget ? "success" : "aborted");
  ml_.close();

  RunFacts facts;
  facts.initSeconds = initSeconds_;
  facts.threadsPerRank = threads_;
  facts.allowedCpusPerRank = allowedCpus_;
  facts.device = device_.description;

  facts.accumulationSteps = recipe_.accumulation;
  facts.virtualWorkers = recipe_.step.groups;
  facts.optimizer = recipe_.optimizer.name;
  facts.kfac = optimizer_->kfac() != nullptr;
  facts.peakLr = recipe_.peakLr;
  facts.precision = precisionName(recipe_.precision);
  facts.exchangeDtype = recipe_.exchangeDtype;
  facts.lossScaling = scaler_.has_value();
  facts.finalLossScale = scaler_ ? scaler_->scale() : 1.0;
  facts.exchangeBytesPerStep = exchangeBytes_;
  facts.partition = ddp_->partitioned() ? "optimizer" : "none";
  facts.fusionBytes = static_cast<int64_t>(ddp_->fusionBytes());
  facts.optimizerStateBytes = optimizer_->stateBytes();
  facts.model = recipe_.modelName;
  facts.parameters = countParameters(*model_);
  ddp_->waitWeights();
  if (start_.runDir) {
    // Rank 0's weights and BatchNorm statistics, readable by torch.load.
    saveStateDict(*model_, start_.runDir->file("model.pt"));
    start_.runDir->writeJson("summary.json", summaryJson(result, facts));
  }
  if (!quiet_) printOutcome(result, facts);
  return result;
}

}  // namespace

TrainResult train(const Config& config, const TrainOptions& options, TrainingJob job) {
  validateTrainingConfig(config);
  TrainingRun run(config, options, std::move(job));
  return run.run();
}

}  // namespace bigbatch
