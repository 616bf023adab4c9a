#include "run_report.h"

#include <fmt/format.h>

#include <cstdio>

namespace bigbatch::train_detail {

nlohmann::ordered_json summaryJson(const TrainResult& result, const RunFacts& facts) {
  nlohmann::ordered_json summary;
  summary["reached_target"] = result.reachedTarget;
  summary["target_accuracy"] = result.targetAccuracy;
  summary["final_accuracy"] = result.finalAccuracy;
  summary["best_accuracy"] = result.bestAccuracy;
  summary["time_to_target_s"] = result.reachedTarget ? nlohmann::ordered_json(result.timeToTargetS)
                                                     : nlohmann::ordered_json();
  summary["train_time_s"] = result.trainTimeS;
  summary["init_time_s"] = facts.initSeconds;
  summary["throughput_img_s"] = result.throughputImgS;
  summary["epochs"] = result.epochs;
  summary["steps"] = result.steps;
  summary["global_batch_size"] = result.globalBatchSize;
  summary["world_size"] = result.worldSize;
  summary["threads_per_rank"] = facts.threadsPerRank;
  summary["accumulation_steps"] = facts.accumulationSteps;
  summary["virtual_workers"] = facts.virtualWorkers;
  summary["optimizer"] = facts.optimizer;
  summary["peak_lr"] = facts.peakLr;
  summary["precision"] = facts.precision;
  summary["exchange_dtype"] = facts.exchangeDtype;
  summary["loss_scaling"] = facts.lossScaling;
  summary["final_loss_scale"] = facts.finalLossScale;
  summary["exchange_bytes_per_step"] = facts.exchangeBytesPerStep;
  summary["model"] = facts.model;
  summary["parameters"] = facts.parameters;
  summary["first_epoch_loss"] = result.firstLoss;
  summary["last_epoch_loss"] = result.lastLoss;
  return summary;
}

void printOutcome(const TrainResult& result, const RunFacts& facts) {
  if (result.reachedTarget) {
    fmt::print("reached target {:.2f}% in {} epochs: time to accuracy {:.1f} s "
               "(MLPerf run_start to run_stop; {:.1f} s initialisation before it), "
               "{:.0f} img/s on {} rank(s)\n",
               100 * result.targetAccuracy, result.epochs, result.timeToTargetS, facts.initSeconds,
               result.throughputImgS, result.worldSize);
  } else {
    fmt::print("target {:.2f}% NOT reached in {} epochs: best {:.2f}%, final {:.2f}%, "
               "{:.1f} s, {:.0f} img/s on {} rank(s)\n",
               100 * result.targetAccuracy, result.epochs, 100 * result.bestAccuracy,
               100 * result.finalAccuracy, result.trainTimeS, result.throughputImgS,
               result.worldSize);
  }
  std::fflush(stdout);
}

}  // namespace bigbatch::train_detail
