#include "bigbatch/train/trainer.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "bigbatch/common/error.h"
#include "bigbatch/common/mlperf_logger.h"
#include "bigbatch/data/batch.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/data/sampler.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/optim/sgd.h"
#include "bigbatch/schedule/lr_schedule.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/train/run_dir.h"

namespace bigbatch {
namespace {

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

std::string utcStamp() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", std::gmtime(&now));
  return buf;
}

std::string resolveRunDir(const Config& c, const TrainOptions& o) {
  if (!o.runDir.empty()) return o.runDir;
  if (!c.getString("run.dir").empty()) return c.getString("run.dir");
  std::string name = c.getString("run.name");
  if (name.empty()) {
    name = o.configPath.empty() ? "run" : std::filesystem::path(o.configPath).stem().string();
  }
  return (std::filesystem::path(c.getString("run.out_dir")) / (name + "-" + utcStamp())).string();
}

ModelOptions modelOptions(const Config& c, const Dataset& data) {
  ModelOptions m;
  m.name = c.getString("model.name");
  m.widths = c.getIntList("model.widths");
  m.blocks = c.getIntList("model.blocks");
  m.inChannels = data.images.size(1);
  m.numClasses = data.numClasses;
  m.bnMomentum = c.getFloat("model.bn_momentum");
  m.bnEps = c.getFloat("model.bn_eps");
  m.zeroInitResidual = c.getBool("model.zero_init_residual");
  return m;
}

LrScheduleOptions scheduleOptions(const Config& c) {
  LrScheduleOptions s;
  s.baseLr = c.getFloat("optim.lr");
  s.warmupEpochs = c.getFloat("schedule.warmup_epochs");
  s.warmupStartFactor = c.getFloat("schedule.warmup_start_factor");
  s.decay = c.getString("schedule.decay");
  s.endLr = c.getFloat("schedule.end_lr");
  s.polyPower = c.getFloat("schedule.poly_power");
  s.stepEpochs = c.getIntList("schedule.step_epochs");
  s.stepGamma = c.getFloat("schedule.step_gamma");
  s.totalEpochs = static_cast<double>(c.getInt("train.epochs"));
  return s;
}

void toChannelsLast(torch::nn::Module& model) {
  torch::NoGradGuard noGrad;
  for (auto& p : model.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

// Top-1 accuracy of `model` on `data`, in chunks of `batch` images.
double evaluate(ImageClassifierImpl& model, const Dataset& data, int64_t batch, bool channelsLast) {
  torch::NoGradGuard noGrad;
  model.eval();
  int64_t correct = 0;
  std::vector<int64_t> idx;
  for (int64_t begin = 0; begin < data.size(); begin += batch) {
    const int64_t n = std::min(batch, data.size() - begin);
    idx.resize(n);
    for (int64_t i = 0; i < n; ++i) idx[i] = begin + i;
    Batch b = assembleBatch(data, idx, AugmentOptions{}, 0, 0, channelsLast);
    correct += model.forward(b.images).argmax(1).eq(b.labels).sum().item<int64_t>();
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(data.size());
}

std::string f4(double v) { return fmt::format("{:.4f}", v); }
std::string f6(double v) { return fmt::format("{:.6g}", v); }

}  // namespace

TrainResult train(const Config& c, const TrainOptions& o) {
  validateTrainingConfig(c);
  const int rank = 0, worldSize = 1;  // single process; the ddp module widens this
  initLogging(rank, o.verbosity);
  const bool quiet = o.verbosity == Verbosity::kQuiet;

  RunDir runDir(resolveRunDir(c, o), o.overwrite);
  runDir.writeText("config.toml", c.toToml());
  MlperfLogger ml;
  ml.open(runDir.file("mlperf.log"), /*echo=*/false);

  // MLPerf timing: init_start .. init_stop covers set-up; the score is
  // run_stop - run_start, and run_start comes right after init_stop.
  BIGBATCH_MLLOG_POINT(ml, mlkey::kCacheClear, true);
  BIGBATCH_MLLOG_START(ml, mlkey::kInitStart);
  const auto initStart = Clock::now();

  BIGBATCH_MLLOG_POINT(ml, mlkey::kSubmissionBenchmark, c.getString("mlperf.submission_benchmark"));
  BIGBATCH_MLLOG_POINT(ml, mlkey::kSubmissionOrg, c.getString("mlperf.submission_org"));
  BIGBATCH_MLLOG_POINT(ml, mlkey::kSubmissionDivision, c.getString("mlperf.submission_division"));
  BIGBATCH_MLLOG_POINT(ml, mlkey::kSubmissionStatus, c.getString("mlperf.submission_status"));
  std::string platform = c.getString("mlperf.submission_platform");
  if (platform.empty()) platform = fmt::format("{}x{}", worldSize, cpuModel());
  BIGBATCH_MLLOG_POINT(ml, mlkey::kSubmissionPlatform, platform);

  int64_t threads = c.getInt("run.threads");
  if (threads == 0) {
    threads = std::max<int64_t>(1, std::thread::hardware_concurrency() / worldSize);
  }
  torch::set_num_threads(static_cast<int>(threads));

  // Data.
  Dataset trainData, testData;
  if (c.getString("data.dataset") == "synthetic") {
    trainData = makeSyntheticDataset(std::max<int64_t>(c.getInt("data.train_samples"), 1024), 1, 28,
                                     28, 10, static_cast<uint64_t>(c.getInt("run.seed")));
    testData = makeSyntheticDataset(std::max<int64_t>(c.getInt("data.eval_samples"), 1024), 1, 28,
                                    28, 10, static_cast<uint64_t>(c.getInt("run.seed")) + 1);
  } else {
    trainData = loadFashionMnist(c.getString("data.path"), "train");
    testData = loadFashionMnist(c.getString("data.path"), "test");
  }
  trainData = takeFirst(trainData, c.getInt("data.train_samples"));
  testData = takeFirst(testData, c.getInt("data.eval_samples"));
  const AugmentOptions augment{c.getBool("data.flip"), c.getInt("data.pad_crop")};
  const bool channelsLast = c.getBool("model.channels_last");

  // Model: every rank builds it from the same seed (no broadcast needed).
  const uint64_t seed = static_cast<uint64_t>(c.getInt("run.seed"));
  torch::manual_seed(seed);
  auto model = buildModel(modelOptions(c, trainData));
  if (channelsLast) toChannelsLast(*model);
  model->train();

  SgdOptions sgdOptions;
  sgdOptions.momentum = c.getFloat("optim.momentum");
  sgdOptions.weightDecay = c.getFloat("optim.weight_decay");
  sgdOptions.nesterov = c.getBool("optim.nesterov");
  sgdOptions.excludeBnAndBias = c.getBool("optim.exclude_bn_bias");
  Sgd optimizer(model->parameters(), sgdOptions);
  const LrSchedule schedule(scheduleOptions(c));

  const int64_t batchPerRank = c.getInt("train.batch_size");
  const int64_t globalBatch = batchPerRank * worldSize;
  const int64_t epochs = c.getInt("train.epochs");
  const int64_t stepsPerEpoch = (trainData.size() + globalBatch - 1) / globalBatch;
  const double target = c.getFloat("train.target_accuracy");
  const double smoothing = c.getFloat("train.label_smoothing");

  BIGBATCH_MLLOG_POINT(ml, mlkey::kSeed, seed);
  BIGBATCH_MLLOG_POINT(ml, mlkey::kGlobalBatchSize, globalBatch);
  BIGBATCH_MLLOG_POINT(ml, mlkey::kGradientAccumulationSteps, 1);
  BIGBATCH_MLLOG_POINT(ml, mlkey::kTrainSamples, trainData.size());
  BIGBATCH_MLLOG_POINT(ml, mlkey::kEvalSamples, testData.size());
  BIGBATCH_MLLOG_POINT(ml, mlkey::kOptName, "sgd");
  BIGBATCH_MLLOG_POINT(ml, "sgd_opt_base_learning_rate", c.getFloat("optim.lr"));
  BIGBATCH_MLLOG_POINT(ml, "sgd_opt_end_learning_rate", c.getFloat("schedule.end_lr"));
  BIGBATCH_MLLOG_POINT(ml, "sgd_opt_learning_rate_decay_poly_power", c.getFloat("schedule.poly_power"));
  BIGBATCH_MLLOG_POINT(ml, "sgd_opt_learning_rate_decay_steps",
                       static_cast<int64_t>(std::llround((epochs - c.getFloat("schedule.warmup_epochs")) *
                                                         stepsPerEpoch)));
  BIGBATCH_MLLOG_POINT(ml, "sgd_opt_weight_decay", c.getFloat("optim.weight_decay"));
  BIGBATCH_MLLOG_POINT(ml, "sgd_opt_momentum", c.getFloat("optim.momentum"));
  BIGBATCH_MLLOG_POINT(ml, "opt_learning_rate_warmup_epochs", c.getFloat("schedule.warmup_epochs"));
  BIGBATCH_MLLOG_POINT(ml, "model_bn_span", batchPerRank);

  if (!quiet) {
    fmt::print("bigbatch: {} ({} parameters), {} train / {} test images, global batch {}, "
               "{} thread(s) x {} rank(s)\n  run directory: {}\n",
               c.getString("model.name"), countParameters(*model), trainData.size(),
               testData.size(), globalBatch, threads, worldSize, runDir.path());
    std::fflush(stdout);
  }

  BIGBATCH_MLLOG_END(ml, mlkey::kInitStop);
  BIGBATCH_MLLOG_START(ml, mlkey::kRunStart);
  const auto runStart = Clock::now();
  const double initSeconds = std::chrono::duration<double>(runStart - initStart).count();

  TrainResult result;
  result.targetAccuracy = target;
  result.globalBatchSize = globalBatch;
  result.worldSize = worldSize;
  result.runDir = runDir.path();
  double trainSeconds = 0;  // training steps only, for throughput
  int64_t trainImages = 0;
  int64_t step = 0;
  const std::vector<std::string> columns = {
      "epoch", "step", "lr", "train_loss", "train_acc", "test_acc", "epoch_time_s", "img_s",
      "elapsed_s", "data_s", "forward_s", "backward_s", "optimizer_s", "eval_s"};

  // A run that fails part-way still closes its MLPerf log (status aborted).
  try {
    for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
      BIGBATCH_MLLOG_START(ml, mlkey::kBlockStart, {{"first_epoch_num", epoch}, {"epoch_count", 1}});
      BIGBATCH_MLLOG_START(ml, mlkey::kEpochStart, {{"epoch_num", epoch}});
      const auto epochStart = Clock::now();
      const ShardPlan plan = planEpoch(trainData.size(), globalBatch, rank, worldSize, seed, epoch);
      double dataS = 0, forwardS = 0, backwardS = 0, optimizerS = 0;
      double lossSum = 0;
      int64_t correct = 0, seen = 0;
      double lr = 0;
      for (int64_t s = 0; s < plan.steps; ++s) {
        auto t0 = Clock::now();
        Batch batch = assembleBatch(trainData, plan.batches[s], augment, seed, epoch, channelsLast);
        auto t1 = Clock::now();
        torch::Tensor logits = model->forward(batch.images);
        torch::Tensor loss = torch::nn::functional::cross_entropy(
            logits, batch.labels,
            torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(smoothing));
        auto t2 = Clock::now();
        optimizer.zeroGrad();
        loss.backward();
        auto t3 = Clock::now();
        lr = schedule.at(static_cast<double>(epoch - 1) + static_cast<double>(s) / plan.steps);
        optimizer.step(lr);
        auto t4 = Clock::now();
        const double lossValue = loss.item<double>();
        BIGBATCH_CHECK(std::isfinite(lossValue), Error,
                       "training loss is {} at epoch {} step {}; lower optim.lr or raise "
                       "schedule.warmup_epochs",
                       lossValue, epoch, s);
        lossSum += lossValue * batch.size();
        correct += logits.argmax(1).eq(batch.labels).sum().item<int64_t>();
        seen += batch.size();
        dataS += std::chrono::duration<double>(t1 - t0).count();
        forwardS += std::chrono::duration<double>(t2 - t1).count();
        backwardS += std::chrono::duration<double>(t3 - t2).count();
        optimizerS += std::chrono::duration<double>(t4 - t3).count();
        ++step;
      }
      const double epochTrainS = secondsSince(epochStart);
      trainSeconds += epochTrainS;
      trainImages += seen * worldSize;
      BIGBATCH_MLLOG_END(ml, mlkey::kEpochStop, {{"epoch_num", epoch}});

      double testAcc = std::nan("");
      double evalS = 0;
      const bool evalNow = epoch % c.getInt("train.eval_every") == 0 || epoch == epochs;
      if (evalNow) {
        BIGBATCH_MLLOG_START(ml, mlkey::kEvalStart, {{"epoch_num", epoch}});
        const auto evalStart = Clock::now();
        testAcc = evaluate(*model, testData, c.getInt("train.eval_batch_size"), channelsLast);
        evalS = secondsSince(evalStart);
        BIGBATCH_MLLOG_POINT(ml, mlkey::kEvalAccuracy, testAcc, {{"epoch_num", epoch}});
        BIGBATCH_MLLOG_END(ml, mlkey::kEvalStop, {{"epoch_num", epoch}});
        result.finalAccuracy = testAcc;
        result.bestAccuracy = std::max(result.bestAccuracy, testAcc);
      }
      BIGBATCH_MLLOG_END(ml, mlkey::kBlockStop, {{"first_epoch_num", epoch}});

      const double trainLoss = lossSum / static_cast<double>(seen);
      const double trainAcc = static_cast<double>(correct) / static_cast<double>(seen);
      const double elapsed = secondsSince(runStart);
      const double imgS = static_cast<double>(seen * worldSize) / epochTrainS;
      if (epoch == 1) result.firstLoss = trainLoss;
      result.lastLoss = trainLoss;
      result.epochs = epoch;
      result.steps = step;
      runDir.appendMetrics(columns,
                           {std::to_string(epoch), std::to_string(step), f6(lr), f6(trainLoss),
                            f4(trainAcc), evalNow ? f4(testAcc) : "", f4(epochTrainS),
                            fmt::format("{:.1f}", imgS), f4(elapsed), f4(dataS), f4(forwardS),
                            f4(backwardS), f4(optimizerS), f4(evalS)});
      if (!quiet) {
        fmt::print("epoch {:>3}/{}  loss {:.4f}  train {:6.2f}%  test {}  lr {:.4g}  {:7.0f} img/s  "
                   "elapsed {:6.1f} s\n",
                   epoch, epochs, trainLoss, 100 * trainAcc,
                   evalNow ? fmt::format("{:6.2f}%", 100 * testAcc) : std::string("   -   "), lr,
                   imgS, elapsed);
        std::fflush(stdout);
      }
      if (evalNow && testAcc >= target && !result.reachedTarget) {
        result.reachedTarget = true;
        result.timeToTargetS = secondsSince(runStart);
        if (c.getBool("train.stop_at_target")) break;
      }
    }

  } catch (...) {
    BIGBATCH_MLLOG_END(ml, mlkey::kRunStop, {{"status", "aborted"}});
    throw;
  }

  result.trainTimeS = secondsSince(runStart);
  result.throughputImgS = trainSeconds > 0 ? static_cast<double>(trainImages) / trainSeconds : 0;
  BIGBATCH_MLLOG_END(ml, mlkey::kRunStop,
                     {{"status", result.reachedTarget ? "success" : "aborted"}});
  ml.close();

  nlohmann::ordered_json summary;
  summary["reached_target"] = result.reachedTarget;
  summary["target_accuracy"] = result.targetAccuracy;
  summary["final_accuracy"] = result.finalAccuracy;
  summary["best_accuracy"] = result.bestAccuracy;
  summary["time_to_target_s"] =
      result.reachedTarget ? nlohmann::ordered_json(result.timeToTargetS) : nlohmann::ordered_json();
  summary["train_time_s"] = result.trainTimeS;
  summary["init_time_s"] = initSeconds;
  summary["throughput_img_s"] = result.throughputImgS;
  summary["epochs"] = result.epochs;
  summary["steps"] = result.steps;
  summary["global_batch_size"] = result.globalBatchSize;
  summary["world_size"] = result.worldSize;
  summary["threads_per_rank"] = threads;
  summary["model"] = c.getString("model.name");
  summary["parameters"] = countParameters(*model);
  summary["first_epoch_loss"] = result.firstLoss;
  summary["last_epoch_loss"] = result.lastLoss;
  runDir.writeJson("summary.json", summary);

  if (!quiet) {
    if (result.reachedTarget) {
      fmt::print("reached target {:.2f}% in {} epochs: time to accuracy {:.1f} s "
                 "(MLPerf run_start to run_stop; {:.1f} s initialisation before it), "
                 "{:.0f} img/s\n",
                 100 * target, result.epochs, result.timeToTargetS, initSeconds,
                 result.throughputImgS);
    } else {
      fmt::print("target {:.2f}% NOT reached in {} epochs: best {:.2f}%, final {:.2f}%, "
                 "{:.1f} s, {:.0f} img/s\n",
                 100 * target, result.epochs, 100 * result.bestAccuracy,
                 100 * result.finalAccuracy, result.trainTimeS, result.throughputImgS);
    }
    std::fflush(stdout);
  }
  return result;
}

}  // namespace bigbatch
