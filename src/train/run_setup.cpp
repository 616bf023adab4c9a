#include "run_setup.h"

#include <algorithm>
#include <cmath>

#include <unistd.h>

#include "bigbatch/amp/precision.h"
#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/collectives/collectives.h"
#include "bigbatch/common/cpu_affinity.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/hash.h"
#include "bigbatch/models/fused_batch_norm.h"
#include "bigbatch/models/scripted_model.h"
#include "bigbatch/schedule/piecewise_linear.h"
#include "bigbatch/train/partitioned_state.h"
#include "step/gpu_exchange.h"
#include "run/model_state.h"
#include "run/run_checkpointer.h"

namespace bigbatch::train_detail {

RunComponents::RunComponents(const Config& c) : config(c) {}
RunComponents::~RunComponents() = default;

namespace {

// This machine's name, as fault.host names a host.
std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

// Which ranks train, each on its device; the run directory and MLPerf
// log on rank 0; the checkpoint a resume continues from (collective: the
// ranks agree on all of it).
RunStart joinRanks(Config& config, const TrainOptions& options, RunRecorder& recorder) {
  RunStart start = startRun(config, options, recorder.mlperf());
  makeCurrent(start.device);  // this thread's tensors and streams go to this rank's GPU
  recorder.attach(start.runDir.get(), start.rank == 0 && options.verbosity != Verbosity::kQuiet);
  if (recorder.prints()) announceResume(start, config, options);
  return start;
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

// Intra-op threads: run.threads, or this rank's share of the CPUs it may
// run on — all of them when a launcher pinned it, else split among the
// host's ranks that share them. A rank allowed fewer CPUs than it has
// threads is warned: its threads would take turns (collective).
RunThreads chooseThreads(Communicator& comm, int64_t asked) {
  const std::vector<int> cpus = allowedCpus();
  const int64_t allowed = std::max<int64_t>(1, static_cast<int64_t>(cpus.size()));
  RunThreads t;
  t.perRank = asked;
  if (t.perRank == 0) t.perRank = std::max<int64_t>(1, allowed / ranksSharing(comm, cpus));
  if (t.perRank > allowed) {
    log().warn(
        "{} thread(s) on {} allowed CPU(s) ({}): the threads take turns; bind each rank to as "
        "many CPUs as threads (bigbatch --workers does) or lower run.threads",
        t.perRank, allowed, formatCpuList(cpus));
  }
  int64_t fewest = -allowed;
  if (comm.size() > 1) allreduceMaxInt64(comm, &fewest, 1, /*tag=*/0x7e11);
  t.fewestAllowedCpus = -fewest;
  torch::set_num_threads(static_cast<int>(t.perRank));
  return t;
}

void toChannelsLast(torch::nn::Module& model) {
  torch::NoGradGuard noGrad;
  for (auto& p : model.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

// The model: the caller's, or the recipe's built from the same seed on
// every rank (or loaded from the same TorchScript file, its logits checked
// on one batch of the data's shape) — no broadcast (the checksum in
// restoreOrVerify() proves the ranks agree); --init-from's weights; then on
// this rank's device.
// model.fused_bn (models/fused_batch_norm.h): "on" where asked (the config
// check refused it where it cannot run), "auto" for fp16 channels-last
// ResNet-50 on a GPU of the CUDA build (cuDNN fuses half only).
bool fusesBatchNorm(const RunRecipe& recipe, const torch::Device& device) {
  if (recipe.fusedBn == "on") return true;
  return recipe.fusedBn == "auto" && fusedBatchNormAvailable() && device.is_cuda() &&
         recipe.precision == Precision::kFp16 && recipe.channelsLast &&
         recipe.modelName == "resnet50";
}

std::shared_ptr<ImageClassifierImpl> buildRunModel(const RunRecipe& recipe,
                                                   const TrainingData& data,
                                                   std::shared_ptr<ImageClassifierImpl> given,
                                                   const TrainOptions& options,
                                                   const RunStart& start) {
  std::shared_ptr<ImageClassifierImpl> model = std::move(given);
  if (!model) {
    torch::manual_seed(recipe.seed);
    ModelOptions o = modelOptions(recipe, data.channels, data.numClasses);
    o.fusedBatchNorm = fusesBatchNorm(recipe, start.device.device);
    model = buildModel(o);
  }
  if (auto* scripted = dynamic_cast<ScriptedClassifierImpl*>(model.get())) {
    const ImageShape shape = imageShapeOf(data);
    scripted->checkLogits(shape.channels, shape.height, shape.width, shape.classes);
  }
  if (!options.initFrom.empty() && !start.resume) {
    loadStateDict(*model, options.initFrom, model->tensorAliases());  // every rank: the checksum still holds
    log().info("initial weights from {}", options.initFrom);
  }
  // Built and seeded on the CPU, then moved: the same initial weights on
  // every device and in both builds.
  model->to(start.device.device);
  if (recipe.channelsLast) toChannelsLast(*model);
  model->train();
  return model;
}

// The gradient exchange, the timeline that records it, and the stall
// guard: each rank's step and phase in shared memory, and under MPI a
// watchdog that ends a stalled job naming the rank that stopped
// (collective).
RunExchange connectExchange(ImageClassifierImpl& model, const RunRecipe& recipe,
                            const TrainOptions& options, const RunStart& start,
                            RunRecorder& recorder) {
  RunExchange x;
  if (!options.timelinePath.empty()) {
    x.timeline =
        std::make_unique<Timeline>(start.rank, options.timelineFirstStep, options.timelineLastStep);
  }
  DdpOptions ddpOptions = recipe.ddp;
  ddpOptions.stageThroughHost = ddpOptions.stageThroughHost || options.stageThroughHost;
  if (x.timeline) {
    Timeline* tl = x.timeline.get();
    ddpOptions.onExchange = [tl](size_t bucket, size_t bytes,
                                 std::chrono::steady_clock::time_point begin,
                                 std::chrono::steady_clock::time_point end, bool inlined) {
      if (tl->active()) {
        tl->record("allreduce", Timeline::kCommThread, begin, end,
                   fmt::format(R"("bucket":{},"bytes":{},"on_compute_thread":{})", bucket, bytes,
                               inlined ? "true" : "false"));
      }
    };
  }
  Communicator& comm = *start.comm;
  x.stallGuard = std::make_unique<StallGuard>(comm, recipe.timeoutS,
                                              [&recorder] { recorder.runStop("aborted"); });
  // The partition runs on the host exchange ("auto" takes it; "nccl" with
  // it was refused with the config); compression runs on either.
  x.nccl = connectGpuExchange(comm, start.device, recipe.gpuExchange, recipe.timeoutS,
                              ddpOptions.partition);
  if (x.nccl) {
    ddpOptions.nccl = x.nccl->comm.get();
    ddpOptions.ncclStream = x.nccl->stream;
  }
  x.job = std::make_unique<JobCollectives>(comm, x.stallGuard->watchdog());
  x.ddp = std::make_unique<DistributedDataParallel>(model, *x.job, ddpOptions);
  return x;
}

// The gradient codec's state (PowerSGD's step count, Q matrices and each
// rank's error memory): as saved on the same world size. On another, the
// error memory belongs to ranks that no longer match one to one, but what
// matters of it is its sum — what compression left out of the summed
// gradient (powersgd_codec.h: the ranks' errors add up to the sum's
// compression error) — so each of the N new ranks takes 1/N of the old
// ranks' sum: nothing that compression owes the run is dropped. Q and the
// step count are rank 0's (the same on every rank).
void restoreCodec(DistributedDataParallel& ddp, const Checkpoint& k, const RunStart& start) {
  if (k.rankCodec.empty()) return;
  if (k.worldSize == start.worldSize) {
    ddp.loadCodecState(k.rankCodec[static_cast<size_t>(start.rank)]);
    return;
  }
  ddp.loadCodecState(carriedCodecState(k.rankCodec, start.worldSize));
  if (start.rank == 0) {
    log().info("resuming {} rank(s) from a checkpoint of {}: PowerSGD's error memory carried "
               "over, each rank taking 1/{} of the ranks' sum (its Q matrices and step count "
               "kept)",
               start.worldSize, k.worldSize, start.worldSize);
  }
}

// On a resume: the weights and rank 0's buffers on every rank first, so
// the checksum proves every rank read the same checkpoint; then each
// rank's own BatchNorm statistics and RNG state, and the run's position
// and totals. A fresh run checks that the ranks built the same model.
RunState restoreOrVerify(ImageClassifierImpl& model, DistributedDataParallel& ddp,
                         const RunStart& start) {
  const std::optional<ResumePoint>& resume = start.resume;
  if (!resume) {
    ddp.verifyIdentical();
    return RunState{};
  }
  const Checkpoint& k = resume->checkpoint;
  const std::vector<std::string> frozen = model.frozenParameterNames();
  restoreModel(model, k.parameters, k.rankBuffers[0], resume->path, frozen);
  ddp.verifyIdentical();
  const size_t mine = static_cast<size_t>(start.rank) % k.rankBuffers.size();
  restoreModel(model, {}, k.rankBuffers[mine], resume->path, frozen);
  torch::NoGradGuard noGrad;
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(k.rankRng[mine]);
  // The algorithms the interrupted run's tuning chose, on the same ranks.
  if (k.worldSize == start.worldSize) ddp.restoreAllreduceTuning(k.counters);
  restoreCodec(ddp, k, start);
  return RunState::fromCheckpoint(k, start.rank == 0);
}

// The optimizer (K-FAC under it if asked), the schedules and the loss
// scaler; a resume restores their state.
RunOptimization prepareOptimization(ImageClassifierImpl& model, DistributedDataParallel& ddp,
                                    const RunRecipe& recipe, const RunStart& start,
                                    const RunState& state) {
  RunOptimization o;
  o.optimizer = makeRunOptimizer(model, ddp, recipe.optimizer);
  if (recipe.kfac) o.kfacCoverage = o.optimizer->enableKfac(*recipe.kfac);
  if (start.resume) loadWholeOptimizerState(*o.optimizer, ddp, start.resume->checkpoint.optimizer);
  o.lr = std::make_unique<LrSchedule>(recipe.lr);
  o.momentum = std::make_unique<PiecewiseLinear>(recipe.momentumEpochs, recipe.momentumValues,
                                                 recipe.momentum, "momentum schedule");
  o.batch = std::make_unique<BatchSchedule>(recipe.batchSchedule);
  // Mixed precision: 16-bit compute on copies of the fp32 masters, and the
  // loss scaler that keeps small gradients alive in fp16 (amp/).
  checkPrecisionSupported(recipe.precision, start.device.device.type());
  if (recipe.lossScaler) {
    o.scaler = std::make_unique<DynamicLossScaler>(*recipe.lossScaler);
    if (state.lossScale) o.scaler->loadState(*state.lossScale);
  }
  return o;
}

// data.decode = "gpu" (data/gpu_jpeg_pipeline.h): nvJPEG on this rank's GPU,
// its backend chosen here (the banner prints it); the files read by
// data.read_threads host threads (2 where the pipeline would run inline);
// the images written in the compute dtype and the pipeline's layout.
std::shared_ptr<const GpuDecodeSettings> prepareGpuDecode(const RunRecipe& recipe,
                                                          const PipelineOptions& pipeline,
                                                          const RunDevice& device) {
  auto g = std::make_shared<GpuDecodeSettings>();
  g->decoder = std::make_shared<GpuJpegDecoder>(device.device);
  g->reader.readThreads = pipeline.readThreads > 0 ? pipeline.readThreads : 2;
  g->reader.prefetchBatches = pipeline.prefetchBatches;
  g->reader.skipBadSamples = pipeline.skipBadSamples;
  g->dtype = computeType(recipe.precision);
  g->channelsLast = pipeline.channelsLast;
  return g;
}

// Training batches come from the input pipeline (data/input_pipeline.h):
// inline by default (a 28x28 batch costs less than a thread hand-off while
// every core trains), or with threads per stage that prepare the next
// micro-batches while this one trains; under data.decode = "gpu" from the
// GPU decode path instead.
RunInput prepareInput(const RunRecipe& recipe, const TrainingData& data, const RunDevice& device) {
  RunInput in;
  in.source = data.train;
  in.augment = data.trainAugment;
  in.pipeline = pipelineOptionsFor(recipe, recipe.channelsLast && data.channels > 1);
  in.pipeline.pinMemory = device.device.is_cuda();  // batches assembled where H2D starts
  // data.transfer: 8-bit pixels to the device, flipped and normalised there
  // (the training batches only: evaluation's pipeline keeps float).
  in.uint8Transfer = recipe.transfer == "uint8" ||
                     (recipe.transfer == "auto" && device.device.is_cuda());
  in.inputType = in.uint8Transfer ? computeType(recipe.precision) : torch::kFloat;
  if (recipe.data.decode == "gpu") {
    in.gpu = prepareGpuDecode(recipe, in.pipeline, device);
    if (recipe.cacheMb > 0) {
      log().warn("data.cache_mb = {} keeps host-decoded images; with data.decode = \"gpu\" "
                 "nothing is decoded on the host, so no cache is kept",
                 recipe.cacheMb);
    }
    return in;
  }
  if (recipe.cacheMb > 0) {
    in.cache = std::make_shared<DecodedCache>(in.source->size(), recipe.cacheMb << 20);
  }
  return in;
}

// Checkpoints: rank 0 writes; every rank sends its BatchNorm buffers and
// RNG state (they differ per rank) and takes part in the totals.
std::unique_ptr<RunCheckpointer> makeCheckpointer(const RunComponents& run) {
  const RunRecipe& recipe = run.recipe;
  const std::string dir =
      recipe.ckpt.dir.empty() && run.lead ? run.start.runDir->file("checkpoints") : recipe.ckpt.dir;
  return std::make_unique<RunCheckpointer>(
      *run.model, *run.exchange.ddp, *run.exchange.job, *run.optimization.optimizer, run.config,
      *run.fault, run.lead, dir, run.lead ? run.start.runDir->path() : std::string(),
      recipe.ckpt.keep, recipe.ckpt.background, run.start.worldSize, recipe.globalBatch);
}

// On a GPU the step reads its outcome one step late (TrainStep's header)
// where nothing needs it at once: K-FAC's statistics, a codec whose memory
// follows the loss scale (PowerSGD) and a caller's per-step loss
// (TrainOptions::onStep) do; the fused device step must be the optimizer's.
bool defersOutcome(const RunComponents& run, bool perStepLoss) {
  Optimizer& optimizer = *run.optimization.optimizer;
  return run.start.device.device.is_cuda() && optimizer.deviceFusedEligible() &&
         optimizer.kfac() == nullptr && run.recipe.ddp.compression == GradientCompression::kNone &&
         !perStepLoss;
}

std::unique_ptr<TrainStep> makeStep(const RunComponents& run, bool perStepLoss) {
  StepSettings settings = run.recipe.step;
  settings.device = run.start.device.device;
  settings.deferOutcome = defersOutcome(run, perStepLoss);
  settings.cudaGraph = run.recipe.cudaGraph;
  settings.graphSamples = run.recipe.globalBatch;
  BIGBATCH_REQUIRE(!settings.cudaGraph || run.start.worldSize == 1, InvalidArgument,
                   "run.cuda_graph = true with {} ranks: the gradient exchange between ranks is "
                   "not captured (yet); run one rank, or set run.cuda_graph = false",
                   run.start.worldSize);
  BIGBATCH_REQUIRE(!settings.cudaGraph || !perStepLoss, InvalidArgument,
                   "run.cuda_graph = true with a per-step loss callback (TrainOptions::onStep, "
                   "bigbatch tune): it reads each step's loss on the host; set run.cuda_graph = "
                   "false");
  const RunExchange& x = run.exchange;
  return std::make_unique<TrainStep>(*run.model, *x.ddp, *x.job, *run.optimization.optimizer,
                                     run.optimization.scaler.get(), *x.stallGuard, x.timeline.get(),
                                     *run.fault, run.start.rank, settings);
}

// The optimizer steps after warmup in the epoch budget (MLPerf's
// *_learning_rate_decay_steps), counted epoch by epoch: under a batch-size
// schedule an epoch has fewer, larger steps.
int64_t decaySteps(const RunRecipe& recipe, int64_t trainSamples, const BatchSchedule& batches) {
  double total = 0, warmup = 0;
  for (int64_t epoch = 1; epoch <= recipe.epochs; ++epoch) {
    const int64_t batch = recipe.globalBatch * batches.factor(epoch);
    const double steps = static_cast<double>((trainSamples + batch - 1) / batch);
    const double warm = recipe.lr.warmupEpochs - static_cast<double>(epoch - 1);
    total += steps;
    warmup += steps * std::clamp(warm, 0.0, 1.0);
  }
  return static_cast<int64_t>(std::llround(total - warmup));
}

// "fp32", or under compression its factors and what they save.
std::string wireDescription(const RunComponents& run) {
  const RunRecipe& recipe = run.recipe;
  if (recipe.ddp.compression == GradientCompression::kNone) return recipe.exchangeDtype;
  const DistributedDataParallel& ddp = *run.exchange.ddp;
  const int64_t wire = ddp.wireBytesPerStep();
  return fmt::format("PowerSGD rank-{} {} factors{} ({})", recipe.ddp.powerSgd.rank,
                     recipe.exchangeDtype,
                     recipe.ddp.powerSgd.startStep > 0
                         ? fmt::format(" from step {}", recipe.ddp.powerSgd.startStep + 1)
                         : std::string(),
                     wire > 0 ? fmt::format("{:.1f}x fewer bytes than fp32",
                                            static_cast<double>(ddp.fp32BytesPerStep()) / wire)
                              : std::string("nothing exchanged on one rank"));
}

void printBanner(const RunComponents& run) {
  const RunRecipe& recipe = run.recipe;
  const RunDevice& device = run.start.device;
  const DistributedDataParallel& ddp = *run.exchange.ddp;
  const DynamicLossScaler* scaler = run.optimization.scaler.get();
  const int worldSize = run.start.worldSize;
  fmt::print(
      "bigbatch: {} ({} parameters), {}, global batch {} = {} "
      "rank(s) x {} x {} accumulation step(s), BN groups of {}, {} thread(s) per rank, "
      "{} gradient bucket(s), {} peak lr {:.4g}, {} compute, {} on the wire{}\n"
      "  device: {}{}; run directory: {}\n",
      recipe.modelName, countParameters(*run.model), run.data.description, recipe.globalBatch,
      worldSize, recipe.batchPerRank, recipe.accumulation,
      std::max<int64_t>(1, recipe.batchPerRank / recipe.step.groups), run.threads.perRank,
      ddp.buckets().size(),
      recipe.optimizer.name + (run.optimization.optimizer->kfac() ? " on K-FAC directions" : ""),
      recipe.peakLr, precisionName(recipe.precision), wireDescription(run),
      scaler ? fmt::format(", dynamic loss scale from {:g}", scaler->scale()) : "",
      device.description,
      run.exchange.nccl
          ? fmt::format("; gradients summed by NCCL {} on the GPUs", NcclCommunicator::version())
      : device.device.is_cuda() && ddp.partitioned()
          ? "; gradients reduce-scattered through host memory, the optimizer on host slices"
      : device.device.is_cuda() && worldSize > 1 ? "; gradients summed through host memory"
                                                 : "",
      run.start.runDir->path());
  if (const GpuDecodeSettings* gpu = run.input.gpu.get()) {
    fmt::print("  input: JPEGs decoded on the GPU, {}; {} host reader thread(s)\n",
               gpu->decoder->backend(), gpu->reader.readThreads);
  }
  if (const auto& k = run.optimization.kfacCoverage) {
    fmt::print(
        "  K-FAC on {} conv/linear layer(s){}: {:.2f} M values of factor statistics "
        "({:.1f} MB) summed over the ranks every step\n",
        k->layers,
        k->tooLarge ? fmt::format(" ({} more, with a factor over optim.kfac_max_dim = {}, keep "
                                  "their plain gradient; the largest is '{}')",
                                  k->tooLarge, recipe.kfac->maxDim, k->largestSkipped)
                    : std::string(),
        static_cast<double>(k->statisticValues) / 1e6,
        static_cast<double>(k->statisticValues) * 8 / 1e6);
  }
  std::fflush(stdout);
}

}  // namespace

std::unique_ptr<RunComponents> setUpRun(const Config& config, const TrainOptions& options,
                                        TrainingJob job, RunRecorder& recorder) {
  auto owned = std::make_unique<RunComponents>(config);
  RunComponents& run = *owned;
  run.start = joinRanks(run.config, options, recorder);
  run.lead = run.start.rank == 0;
  run.recipe = resolveRecipe(run.config, run.start.worldSize);
  recorder.initStart();

  run.threads = chooseThreads(*run.start.comm, run.recipe.threads);
  run.data = openTrainingData(run.recipe.data, std::move(job.trainData), std::move(job.testData));
  run.model = buildRunModel(run.recipe, run.data, std::move(job.model), options, run.start);
  run.exchange = connectExchange(*run.model, run.recipe, options, run.start, recorder);
  run.state = restoreOrVerify(*run.model, *run.exchange.ddp, run.start);
  run.elapsedBefore = run.state.elapsedS;
  run.optimization =
      prepareOptimization(*run.model, *run.exchange.ddp, run.recipe, run.start, run.state);
  run.input = prepareInput(run.recipe, run.data, run.start.device);
  run.fault = std::make_unique<FaultInjector>(
      run.recipe.fault, FaultInjector::Placement{run.start.rank, run.start.slot, hostName()});
  run.checkpointer = makeCheckpointer(run);
  run.step = makeStep(run, static_cast<bool>(options.onStep));

  const int64_t trainSamples = run.data.train->size();
  recorder.recipe(run.recipe, run.start.worldSize, trainSamples, run.data.test->size(),
                  decaySteps(run.recipe, trainSamples, *run.optimization.batch));
  if (recorder.prints()) printBanner(run);
  return owned;
}

}  // namespace bigbatch::train_detail
