#include "run/run_report.h"

#include <fmt/format.h>

#include <cstdio>

namespace bigbatch::train_detail {
namespace {

std::string f4(double v) { return fmt::format("{:.4f}", v); }
std::string f6(double v) { return fmt::format("{:.6g}", v); }

}  // namespace

const std::vector<std::string>& metricsColumns() {
  static const std::vector<std::string> columns = {
      "epoch",       "step",         "lr",           "train_loss",      "train_acc",
      "test_acc",    "epoch_time_s", "img_s",        "elapsed_s",       "data_s",
      "forward_s",   "backward_s",   "comm_wait_s",  "comm_wait_min_s", "comm_wait_max_s",
      "optimizer_s", "eval_s",       "global_batch", "momentum",        "skipped_steps",
      "loss_scale",  "test_top5"};
  return columns;
}

std::vector<std::string> metricsRow(const EpochRecord& r) {
  return {std::to_string(r.epoch),
          std::to_string(r.step),
          f6(r.lr),
          f6(r.trainLoss),
          f4(r.trainAcc),
          r.testAcc ? f4(*r.testAcc) : "",
          f4(r.epochTimeS),
          fmt::format("{:.1f}", r.imgS),
          f4(r.elapsedS),
          f4(r.times.data),
          f4(r.times.forward),
          f4(r.times.backward),
          f4(r.times.comm),
          f4(r.commWaitMinS),
          f4(r.commWaitMaxS),
          f4(r.times.optimizer),
          f4(r.evalS),
          std::to_string(r.globalBatch),
          f6(r.momentum),
          std::to_string(r.skippedSteps),
          fmt::format("{}", r.lossScale),
          r.testTop5 ? f4(*r.testTop5) : ""};
}

void printEpochLine(const EpochRecord& r, int64_t epochs) {
  fmt::print(
      "epoch {:>3}/{}  loss {:.4f}  train {:6.2f}%  test {}  lr {:.4g}  {:7.0f} img/s  "
      "comm wait {:.2f}-{:.2f} s  elapsed {:6.1f} s\n",
      r.epoch, epochs, r.trainLoss, 100 * r.trainAcc,
      r.testAcc ? fmt::format("{:6.2f}% (top-5 {:6.2f}%)", 100 * *r.testAcc, 100 * *r.testTop5)
                : std::string("   -                    "),
      r.lr,
      r.imgS, r.commWaitMinS, r.commWaitMaxS, r.elapsedS);
  std::fflush(stdout);
}

nlohmann::ordered_json summaryJson(const TrainResult& result, const RunFacts& facts) {
  nlohmann::ordered_json summary;
  summary["reached_target"] = result.reachedTarget;
  summary["target_accuracy"] = result.targetAccuracy;
  summary["final_accuracy"] = result.finalAccuracy;
  summary["best_accuracy"] = result.bestAccuracy;
  summary["final_top5"] = result.finalTop5;
  summary["best_top5"] = result.bestTop5;
  summary["target_metric"] = result.targetMetric;
  summary["time_to_target_s"] = result.reachedTarget ? nlohmann::ordered_json(result.timeToTargetS)
                                                     : nlohmann::ordered_json();
  summary["train_time_s"] = result.trainTimeS;
  summary["init_time_s"] = facts.initSeconds;
  summary["throughput_img_s"] = result.throughputImgS;
  summary["epochs"] = result.epochs;
  summary["paused"] = result.paused;
  summary["steps"] = result.steps;
  summary["global_batch_size"] = result.globalBatchSize;
  summary["world_size"] = result.worldSize;
  summary["threads_per_rank"] = facts.threadsPerRank;
  summary["allowed_cpus_per_rank"] = facts.allowedCpusPerRank;
  summary["device"] = facts.device;
  summary["accumulation_steps"] = facts.accumulationSteps;
  summary["virtual_workers"] = facts.virtualWorkers;
  summary["optimizer"] = facts.optimizer;
  summary["kfac"] = facts.kfac;
  summary["peak_lr"] = facts.peakLr;
  summary["precision"] = facts.precision;
  summary["exchange_dtype"] = facts.exchangeDtype;
  summary["loss_scaling"] = facts.lossScaling;
  summary["final_loss_scale"] = facts.finalLossScale;
  summary["exchange_bytes_per_step"] = facts.exchangeBytesPerStep;
  summary["compression"] = facts.compression;
  summary["compression_ratio"] = facts.compressionRatio;
  summary["partition"] = facts.partition;
  summary["fusion_bytes"] = facts.fusionBytes;
  summary["optimizer_state_bytes"] = facts.optimizerStateBytes;
  summary["model"] = facts.model;
  summary["parameters"] = facts.parameters;
  summary["checkpoints"] = facts.checkpoints;
  summary["checkpoint_wait_s"] = facts.checkpointWaitS;
  summary["checkpoint_background"] = facts.checkpointBackground;
  summary["allreduce_tuned"] = facts.allreduceTuned;
  summary["first_epoch_loss"] = result.firstLoss;
  summary["last_epoch_loss"] = result.lastLoss;
  return summary;
}

void printOutcome(const TrainResult& result, const RunFacts& facts) {
  if (result.paused && !result.reachedTarget) {
    fmt::print(
        "paused after epoch {} (train.stop_after_epoch): final {:.2f}%, {:.1f} s; "
        "`--resume auto` with this run directory continues it\n",
        result.epochs, 100 * result.finalAccuracy, result.trainTimeS);
  } else if (result.reachedTarget) {
    fmt::print("reached target {:.2f}% {} in {} epochs: time to accuracy {:.1f} s "
               "(MLPerf run_start to run_stop; {:.1f} s initialisation before it), "
               "{:.0f} img/s on {} rank(s)\n",
               100 * result.targetAccuracy, result.targetMetric, result.epochs,
               result.timeToTargetS, facts.initSeconds,
               result.throughputImgS, result.worldSize);
  } else {
    const bool top5 = result.targetMetric == "top5";
    fmt::print("target {:.2f}% {} NOT reached in {} epochs: best {:.2f}%, final {:.2f}%, "
               "{:.1f} s, {:.0f} img/s on {} rank(s)\n",
               100 * result.targetAccuracy, result.targetMetric, result.epochs,
               100 * (top5 ? result.bestTop5 : result.bestAccuracy),
               100 * (top5 ? result.finalTop5 : result.finalAccuracy), result.trainTimeS, result.throughputImgS,
               result.worldSize);
  }
  std::fflush(stdout);
}

}  // namespace bigbatch::train_detail
