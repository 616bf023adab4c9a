#include "bigbatch/train/trainer.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <thread>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/amp/precision.h"
#include "bigbatch/ckpt/checkpoint.h"
#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/mlperf_logger.h"
#include "bigbatch/data/batch.h"
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
#include "bigbatch/train/progress.h"
#include "bigbatch/train/resume.h"
#include "bigbatch/train/run_dir.h"
#include "bigbatch/train/timeline.h"
#include "evaluation.h"
#include "model_state.h"
#include "recipe.h"
#include "run_checkpointer.h"
#include "run_report.h"
#include "run_start.h"
#include "run_totals.h"
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

}  // namespace

TrainResult train(const Config& userConfig, const TrainOptions& o, TrainingJob job) {
  validateTrainingConfig(userConfig);
  Config c = userConfig;  // a resume on another world size adjusts the accumulation steps

  // MLPerf timing: init_start .. init_stop covers set-up; the score is
  // run_stop - run_start, and run_start comes right after init_stop.
  const auto initStart = Clock::now();
  MlperfLogger ml;  // stays closed (silent) on ranks other than 0
  RunStart start = startRun(c, o, ml);
  Communicator* comm = start.comm;
  const int rank = start.rank, worldSize = start.worldSize;
  const bool lead = rank == 0;
  const bool quiet = o.verbosity == Verbosity::kQuiet || !lead;
  const std::unique_ptr<RunDir>& runDir = start.runDir;
  const std::optional<ResumePoint>& resume = start.resume;
  if (!quiet) announceResume(start, c, o);
  BIGBATCH_MLLOG_POINT(ml, mlkey::kCacheClear, true);
  BIGBATCH_MLLOG_START(ml, mlkey::kInitStart);

  int64_t threads = c.getInt("run.threads");
  if (threads == 0) {
    const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
    threads = std::max<int64_t>(1, cores / comm->localSize());
  }
  torch::set_num_threads(static_cast<int>(threads));

  // Model: every rank builds it from the same seed (no broadcast; the
  // checksum below proves the ranks agree).
  const uint64_t seed = static_cast<uint64_t>(c.getInt("run.seed"));
  const bool channelsLast = c.getBool("model.channels_last");
  if (!job.trainData.size()) {
    if (c.getString("data.dataset") == "synthetic") {
      job.trainData = makeSyntheticDataset(std::max<int64_t>(c.getInt("data.train_samples"), 1024),
                                           1, 28, 28, 10, seed);
      job.testData = makeSyntheticDataset(std::max<int64_t>(c.getInt("data.eval_samples"), 1024), 1,
                                          28, 28, 10, seed + 1);
    } else {
      job.trainData = loadFashionMnist(c.getString("data.path"), "train");
      job.testData = loadFashionMnist(c.getString("data.path"), "test");
    }
    job.trainData = takeFirst(job.trainData, c.getInt("data.train_samples"));
    job.testData = takeFirst(job.testData, c.getInt("data.eval_samples"));
  }
  const Dataset& trainData = job.trainData;
  const Dataset& testData = job.testData;
  BIGBATCH_REQUIRE(testData.size() > 0, InvalidArgument, "the test set is empty");
  if (!job.model) {
    torch::manual_seed(seed);
    job.model = buildModel(modelOptions(c, trainData));
  }
  auto model = job.model;
  if (!o.initFrom.empty() && !resume) {
    loadStateDict(*model, o.initFrom);  // every rank: the checksum below still holds
    log().info("initial weights from {}", o.initFrom);
  }
  if (channelsLast) toChannelsLast(*model);
  model->train();

  std::unique_ptr<Timeline> timeline;
  if (!o.timelinePath.empty()) {
    timeline = std::make_unique<Timeline>(rank, o.timelineFirstStep, o.timelineLastStep);
  }
  DdpOptions ddpOptions = ddpOptionsFor(c);
  if (timeline) {
    Timeline* tl = timeline.get();
    ddpOptions.onExchange = [tl](size_t bucket, size_t bytes, Clock::time_point start,
                                 Clock::time_point end, bool inlined) {
      if (tl->active()) {
        tl->record("allreduce", Timeline::kCommThread, start, end,
                   fmt::format(R"("bucket":{},"bytes":{},"on_compute_thread":{})", bucket, bytes,
                               inlined ? "true" : "false"));
      }
    };
  }
  // Each rank's step and phase in shared memory, and under MPI a watchdog
  // that ends a stalled job naming the rank that stopped (collective).
  StallGuard stallGuard(*comm, c.getFloat("comm.timeout_s"));
  ddpOptions.watchdog = stallGuard.watchdog();
  DistributedDataParallel ddp(*model, *comm, ddpOptions);
  // Gradient bytes each rank hands to the allreduce per optimizer step.
  int64_t exchangeBytes = 0;
  if (worldSize > 1) {
    for (const auto& b : ddp.buckets()) {
      exchangeBytes += b.numel * static_cast<int64_t>(elementSize(ddpOptions.exchangeType));
    }
  }

  if (resume) {
    // Weights and rank 0's buffers on every rank first, so the checksum
    // below proves every rank read the same checkpoint; then each rank's own
    // BatchNorm statistics and RNG state.
    const Checkpoint& k = resume->checkpoint;
    restoreModel(*model, k.parameters, k.rankBuffers[0], resume->path);
    ddp.verifyIdentical();
    const size_t mine = static_cast<size_t>(rank) % k.rankBuffers.size();
    restoreModel(*model, {}, k.rankBuffers[mine], resume->path);
    torch::NoGradGuard noGrad;
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(k.rankRng[mine]);
  } else {
    ddp.verifyIdentical();
  }

  BIGBATCH_MLLOG_POINT(ml, mlkey::kSubmissionBenchmark, c.getString("mlperf.submission_benchmark"));
  BIGBATCH_MLLOG_POINT(ml, mlkey::kSubmissionOrg, c.getString("mlperf.submission_org"));
  BIGBATCH_MLLOG_POINT(ml, mlkey::kSubmissionDivision, c.getString("mlperf.submission_division"));
  BIGBATCH_MLLOG_POINT(ml, mlkey::kSubmissionStatus, c.getString("mlperf.submission_status"));
  std::string platform = c.getString("mlperf.submission_platform");
  if (platform.empty()) platform = fmt::format("{}x{}", worldSize, cpuModel());
  BIGBATCH_MLLOG_POINT(ml, mlkey::kSubmissionPlatform, platform);

  OptimizerOptions optimOptions = optimizerOptions(c);
  optimOptions.checkFinite = true;  // SGD too: a non-finite gradient never reaches the weights
  const std::unique_ptr<Optimizer> optimizer = makeOptimizer(namedParameters(*model), optimOptions);
  if (c.getBool("optim.kfac")) optimizer->enableKfac(kfacOptions(c));
  if (resume) optimizer->loadState(resume->checkpoint.optimizer);

  const int64_t batchPerRank = c.getInt("train.batch_size");
  const int64_t accumulation = c.getInt("train.accumulation_steps");
  const int64_t groups = c.getInt("train.virtual_workers");
  const int64_t globalBatch = batchPerRank * worldSize * accumulation;
  const int64_t epochs = c.getInt("train.epochs");
  const int64_t stepsPerEpoch = (trainData.size() + globalBatch - 1) / globalBatch;
  const double target = c.getFloat("train.target_accuracy");
  const double smoothing = c.getFloat("train.label_smoothing");
  const double peakLr = c.getFloat("optim.lr_per_256") > 0
                            ? linearScaledLr(c.getFloat("optim.lr_per_256"), globalBatch)
                            : c.getFloat("optim.lr");
  const LrSchedule schedule(scheduleOptions(c, peakLr));
  const PiecewiseLinear momentumSchedule(c.getFloatList("schedule.momentum_epochs"),
                                         c.getFloatList("schedule.momentum_values"),
                                         c.getFloat("optim.momentum"), "momentum schedule");
  const BatchSchedule batchSchedule(BatchScheduleOptions{c.getIntList("schedule.batch_epochs"),
                                                         c.getIntList("schedule.batch_factors"),
                                                         c.getString("schedule.batch_lr_rule")});
  const bool decayFollowsLr = c.getBool("schedule.weight_decay_follows_lr");
  // Mixed precision: 16-bit compute on copies of the fp32 masters, and the
  // loss scaler that keeps small gradients alive in fp16 (amp/).
  const Precision precision = parsePrecision(c.getString("amp.precision"));
  const c10::DeviceType device = c10::DeviceType::CPU;
  checkPrecisionSupported(precision, device);
  std::optional<DynamicLossScaler> scaler;
  if (lossScalingEnabled(c)) {
    scaler.emplace(lossScalerOptions(c));  // a resume restores its state below
  }
  // Training batches come from the input pipeline (data/input_pipeline.h):
  // inline by default (a 28x28 batch costs less than a thread hand-off while
  // every core trains), or with threads per stage that prepare the next
  // micro-batches while this one trains.
  const std::shared_ptr<ImageSource> trainSource = makeIdxSource(trainData);
  const ImageAugment augment = trainAugment(c, trainData);
  const PipelineOptions pipelineOptions =
      pipelineOptionsFor(c, channelsLast && trainSource->channels() > 1);

  BIGBATCH_MLLOG_POINT(ml, mlkey::kSeed, seed);
  BIGBATCH_MLLOG_POINT(ml, mlkey::kGlobalBatchSize, globalBatch);
  BIGBATCH_MLLOG_POINT(ml, mlkey::kGradientAccumulationSteps, accumulation);
  BIGBATCH_MLLOG_POINT(ml, mlkey::kTrainSamples, trainData.size());
  BIGBATCH_MLLOG_POINT(ml, mlkey::kEvalSamples, testData.size());
  logOptimizer(ml, c, peakLr,
               static_cast<int64_t>(
                   std::llround((epochs - c.getFloat("schedule.warmup_epochs")) * stepsPerEpoch)));
  BIGBATCH_MLLOG_POINT(ml, "model_bn_span", std::max<int64_t>(1, batchPerRank / groups));

  if (!quiet) {
    fmt::print(
        "bigbatch: {} ({} parameters), {} train / {} test images, global batch {} = {} "
        "rank(s) x {} x {} accumulation step(s), BN groups of {}, {} thread(s) per rank, "
        "{} gradient bucket(s), {} peak lr {:.4g}, {} compute, {} on the wire{}\n"
        "  run directory: {}\n",
        c.getString("model.name"), countParameters(*model), trainData.size(), testData.size(),
        globalBatch, worldSize, batchPerRank, accumulation,
        std::max<int64_t>(1, batchPerRank / groups), threads, ddp.buckets().size(),
        c.getString("optim.name") + (optimizer->kfac() ? " on K-FAC directions" : ""), peakLr,
        precisionName(precision),
        c.getString("ddp.exchange_dtype"),
        scaler ? fmt::format(", dynamic loss scale from {:g}", scaler->scale()) : "",
        runDir->path());
    std::fflush(stdout);
  }

  BIGBATCH_MLLOG_END(ml, mlkey::kInitStop);
  BIGBATCH_MLLOG_START(ml, mlkey::kRunStart);
  const auto runStart = Clock::now();
  const double initSeconds = std::chrono::duration<double>(runStart - initStart).count();

  Progress progress(!quiet);
  TrainResult result;
  result.targetAccuracy = target;
  result.globalBatchSize = globalBatch;
  result.worldSize = worldSize;
  result.runDir = runDir ? runDir->path() : std::string();
  double trainSeconds = 0;  // training steps only, for throughput
  int64_t trainImages = 0;
  int64_t step = 0;

  // Where to start, and the totals so far (a resume continues them).
  int64_t firstEpoch = 1, firstStep = 0;
  double elapsedBefore = 0;                                     // run seconds before the resume
  StepTally carried;          // the interrupted epoch's sums over the ranks, on rank 0 only
  int64_t carriedSkipped = 0;  // the interrupted epoch's skipped steps, every rank
  if (resume) {
    const Checkpoint& k = resume->checkpoint;
    const RunTotals t = RunTotals::fromCounters(k.counters);
    firstEpoch = k.epoch;
    firstStep = k.stepInEpoch;
    step = k.globalStep;
    trainSeconds = t.trainSeconds;
    trainImages = t.trainImages;
    t.copyTo(result);
    result.steps = step;
    elapsedBefore = t.elapsedS;
    carriedSkipped = t.epochSkipped;
    if (lead) carried = {t.epochLoss, t.epochCorrect, t.epochSeen};
    if (scaler && t.lossScale) scaler->loadState(*t.lossScale);
  }

  // Checkpoints: rank 0 writes; every rank sends its BatchNorm buffers and
  // RNG state (they differ per rank) and takes part in the totals.
  RunCheckpointer checkpointer(
      *model, ddp, *optimizer, c, lead,
      c.getString("ckpt.dir").empty() && lead ? runDir->file("checkpoints")
                                              : c.getString("ckpt.dir"),
      static_cast<int>(c.getInt("ckpt.keep")), worldSize, globalBatch);
  // The run's totals so far, as a checkpoint records them.
  auto totalsNow = [&](double elapsed, int64_t epochSkipped) {
    RunTotals t;
    t.trainSeconds = trainSeconds;
    t.trainImages = trainImages;
    t.elapsedS = elapsed;
    t.copyFrom(result);
    t.epochSkipped = epochSkipped;
    if (scaler) t.lossScale = scaler->state();
    return t;
  };
  const int64_t everyEpochs = c.getInt("ckpt.every_epochs");
  const int64_t everySteps = c.getInt("ckpt.every_steps");

  StepSettings stepSettings;
  stepSettings.accumulation = accumulation;
  stepSettings.groups = groups;
  stepSettings.labelSmoothing = smoothing;
  stepSettings.precision = precision;
  stepSettings.skipNonFinite = c.getString("train.nonfinite") == "skip";
  stepSettings.kfacSamples = c.getInt("optim.kfac_samples");
  stepSettings.faultKind = c.getString("fault.kind");  // tests and docs/RELIABILITY.md
  stepSettings.faultRank = static_cast<int>(c.getInt("fault.rank"));
  stepSettings.faultStep = c.getInt("fault.step");
  TrainStep trainStep(*model, ddp, *optimizer, scaler ? &*scaler : nullptr, stallGuard,
                      timeline.get(), rank, stepSettings);

  // A run that fails part-way still closes its MLPerf log (status aborted).
  try {
    for (int64_t epoch = firstEpoch; epoch <= epochs; ++epoch) {
      BIGBATCH_MLLOG_START(ml, mlkey::kBlockStart,
                           {{"first_epoch_num", epoch}, {"epoch_count", 1}});
      BIGBATCH_MLLOG_START(ml, mlkey::kEpochStart, {{"epoch_num", epoch}});
      const auto epochStart = Clock::now();
      // The batch-size schedule grows each rank's micro-batch.
      const int64_t batchFactor = batchSchedule.factor(epoch);
      const int64_t epochBatch = globalBatch * batchFactor;
      const ShardPlan plan = planEpoch(trainData.size(), epochBatch, rank, worldSize, seed, epoch);
      StepTimes times;
      const int64_t startStep = epoch == firstEpoch ? firstStep : 0;
      StepTally tally;
      if (epoch == firstEpoch) tally = carried;
      double lr = 0, momentum = 0;
      int64_t skipped = epoch == firstEpoch ? carriedSkipped : 0;
      // This rank's micro-batches of the epoch, in training order.
      std::vector<std::vector<int64_t>> microBatches;
      for (int64_t s = startStep; s < plan.steps; ++s) {
        const std::vector<int64_t>& shard = plan.batches[s];
        const int64_t n = static_cast<int64_t>(shard.size());
        for (int64_t a = 0; a < accumulation; ++a) {
          microBatches.emplace_back(shard.begin() + n * a / accumulation,
                                    shard.begin() + n * (a + 1) / accumulation);
        }
      }
      InputPipeline pipeline(trainSource, augment, pipelineOptions, seed, epoch,
                             std::move(microBatches));
      progress.startEpoch(epoch, epochs, plan.steps);
      for (int64_t s = startStep; s < plan.steps; ++s) {
        // Images in this global batch (the last one of an epoch may be short).
        const int64_t stepSamples = std::min(epochBatch, trainData.size() - s * epochBatch);
        const double position =
            static_cast<double>(epoch - 1) + static_cast<double>(s) / plan.steps;
        const double scheduled = schedule.at(position);
        lr = scheduled * batchSchedule.lrMultiplier(epoch);
        momentum = momentumSchedule.at(position);
        const StepOutcome stepped = trainStep.run(
            pipeline, {epoch, s + 1, step + 1, stepSamples},
            {lr, momentum, decayFollowsLr && peakLr > 0 ? scheduled / peakLr : 1.0}, times, tally);
        if (!stepped.applied) ++skipped;
        ++step;
        if (o.onStep) {
          const double global = ddp.allreduceSum({stepped.lossSum})[0];
          // A skipped step reports NaN: its loss did not move the weights.
          o.onStep({epoch, step,
                    stepped.applied ? global / static_cast<double>(stepSamples)
                                    : std::numeric_limits<double>::quiet_NaN(),
                    stepSamples, lr});
        }
        // Rank 0's view: its own loss, every rank's images (same shard sizes).
        progress.update(s + 1, static_cast<int64_t>(tally.seen) * worldSize,
                        tally.lossSum / std::max(tally.seen, 1.0));
        if (everySteps > 0 && step % everySteps == 0 && s + 1 < plan.steps) {
          checkpointer.save({epoch, s + 1, step}, tally,
                            totalsNow(elapsedBefore + secondsSince(runStart), skipped));
        }
      }
      progress.finishEpoch();
      const double epochTrainS = secondsSince(epochStart);
      BIGBATCH_MLLOG_END(ml, mlkey::kEpochStop, {{"epoch_num", epoch}});
      // Epoch totals across ranks; the exposed wait per rank as min and max,
      // since waiting for a slower rank looks like communication.
      const auto totals = ddp.allreduceSum({tally.lossSum, tally.correct, tally.seen});
      const auto waitMax = ddp.allreduceMax({times.comm, epochTrainS});
      const auto waitMin = ddp.allreduceMin({times.comm});
      trainSeconds += waitMax[1];
      trainImages += static_cast<int64_t>(totals[2]);

      double testAcc = std::nan("");
      double evalS = 0;
      const bool evalNow = epoch % c.getInt("train.eval_every") == 0 || epoch == epochs;
      if (evalNow) {
        BIGBATCH_MLLOG_START(ml, mlkey::kEvalStart, {{"epoch_num", epoch}});
        const auto evalStart = Clock::now();
        if (c.getBool("train.average_bn_stats")) ddp.averageBuffers();
        const double mine =
            static_cast<double>(evaluateShard(*model, testData, c.getInt("train.eval_batch_size"),
                                              channelsLast, precision, rank, worldSize));
        testAcc = ddp.allreduceSum({mine})[0] / static_cast<double>(testData.size());
        evalS = secondsSince(evalStart);
        if (timeline && timeline->active()) {
          timeline->record("evaluation", Timeline::kComputeThread, evalStart, Clock::now(),
                           fmt::format(R"("epoch":{})", epoch));
        }
        BIGBATCH_MLLOG_POINT(ml, mlkey::kEvalAccuracy, testAcc, {{"epoch_num", epoch}});
        BIGBATCH_MLLOG_END(ml, mlkey::kEvalStop, {{"epoch_num", epoch}});
        result.finalAccuracy = testAcc;
        result.bestAccuracy = std::max(result.bestAccuracy, testAcc);
      }
      BIGBATCH_MLLOG_END(ml, mlkey::kBlockStop, {{"first_epoch_num", epoch}});

      EpochRecord record;
      record.epoch = epoch;
      record.step = step;
      record.lr = lr;
      record.momentum = momentum;
      record.trainLoss = totals[0] / totals[2];
      record.trainAcc = totals[1] / totals[2];
      if (evalNow) record.testAcc = testAcc;
      record.epochTimeS = epochTrainS;
      record.imgS = totals[2] / waitMax[1];
      record.elapsedS = elapsedBefore + secondsSince(runStart);
      record.times = times;
      record.commWaitMinS = waitMin[0];
      record.commWaitMaxS = waitMax[0];
      record.evalS = evalS;
      record.globalBatch = epochBatch;
      record.skippedSteps = skipped;
      record.lossScale = scaler ? scaler->scale() : 1.0;
      if (epoch == 1) result.firstLoss = record.trainLoss;
      result.lastLoss = record.trainLoss;
      result.epochs = epoch;
      result.steps = step;
      if (runDir) runDir->appendMetrics(metricsColumns(), metricsRow(record));
      if (!quiet) printEpochLine(record, epochs);
      bool stop = false;
      if (evalNow && testAcc >= target && !result.reachedTarget) {
        result.reachedTarget = true;
        result.timeToTargetS = elapsedBefore + secondsSince(runStart);
        stop = c.getBool("train.stop_at_target");
      }
      if (stop || epoch == epochs || (everyEpochs > 0 && epoch % everyEpochs == 0)) {
        checkpointer.save({epoch + 1, 0, step}, {}, totalsNow(record.elapsedS, 0));
      }
      if (stop) break;
    }

  } catch (const std::exception& e) {
    // Tell the other ranks, so they fail now instead of at their deadline.
    comm->postError(e.what());
    BIGBATCH_MLLOG_END(ml, mlkey::kRunStop, {{"status", "aborted"}});
    throw;
  }

  if (timeline) {
    // Rank 0 collects every rank's events into one file.
    const auto parts = ddp.gatherToRoot(timeline->eventsJson());
    if (lead) {
      Timeline::write(o.timelinePath, parts);
      if (!quiet) fmt::print("timeline ({} rank(s)) written to {}\n", parts.size(), o.timelinePath);
    }
  }

  result.trainTimeS = elapsedBefore + secondsSince(runStart);
  result.throughputImgS = trainSeconds > 0 ? static_cast<double>(trainImages) / trainSeconds : 0;
  BIGBATCH_MLLOG_END(ml, mlkey::kRunStop,
                     {{"status", result.reachedTarget ? "success" : "aborted"}});
  ml.close();

  RunFacts facts;
  facts.initSeconds = initSeconds;
  facts.threadsPerRank = threads;
  facts.accumulationSteps = accumulation;
  facts.virtualWorkers = groups;
  facts.optimizer = c.getString("optim.name");
  facts.kfac = optimizer->kfac() != nullptr;
  facts.peakLr = peakLr;
  facts.precision = precisionName(precision);
  facts.exchangeDtype = c.getString("ddp.exchange_dtype");
  facts.lossScaling = scaler.has_value();
  facts.finalLossScale = scaler ? scaler->scale() : 1.0;
  facts.exchangeBytesPerStep = exchangeBytes;
  facts.model = c.getString("model.name");
  facts.parameters = countParameters(*model);
  if (runDir) {
    // Rank 0's weights and BatchNorm statistics, readable by torch.load.
    saveStateDict(*model, runDir->file("model.pt"));
    runDir->writeJson("summary.json", summaryJson(result, facts));
  }
  if (!quiet) printOutcome(result, facts);
  return result;
}

}  // namespace bigbatch
