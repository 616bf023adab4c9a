#include "run_totals.h"

namespace bigbatch::train_detail {

void RunTotals::copyFrom(const TrainResult& r) {
  bestAccuracy = r.bestAccuracy;
  finalAccuracy = r.finalAccuracy;
  reachedTarget = r.reachedTarget;
  timeToTargetS = r.timeToTargetS;
  firstLoss = r.firstLoss;
  lastLoss = r.lastLoss;
  epochs = r.epochs;
}

void RunTotals::copyTo(TrainResult& r) const {
  r.bestAccuracy = bestAccuracy;
  r.finalAccuracy = finalAccuracy;
  r.reachedTarget = reachedTarget;
  r.timeToTargetS = timeToTargetS;
  r.firstLoss = firstLoss;
  r.lastLoss = lastLoss;
  r.epochs = epochs;
}

std::map<std::string, double> RunTotals::toCounters() const {
  std::map<std::string, double> c = {{"train_seconds", trainSeconds},
                                     {"train_images", static_cast<double>(trainImages)},
                                     {"best_accuracy", bestAccuracy},
                                     {"final_accuracy", finalAccuracy},
                                     {"reached_target", reachedTarget ? 1.0 : 0.0},
                                     {"time_to_target_s", timeToTargetS},
                                     {"first_loss", firstLoss},
                                     {"last_loss", lastLoss},
                                     {"epochs", static_cast<double>(epochs)},
                                     {"elapsed_s", elapsedS},
                                     {"epoch_loss_sum", epochLoss},
                                     {"epoch_correct", epochCorrect},
                                     {"epoch_seen", epochSeen},
                                     {"epoch_skipped", static_cast<double>(epochSkipped)}};
  if (lossScale) {
    c["loss_scale"] = lossScale->scale;
    c["loss_scale_clean_steps"] = static_cast<double>(lossScale->cleanSteps);
    c["loss_scale_overflows_left"] = static_cast<double>(lossScale->overflowsLeft);
  }
  return c;
}

RunTotals RunTotals::fromCounters(const std::map<std::string, double>& counters) {
  auto get = [&](const char* key) {
    auto it = counters.find(key);
    return it == counters.end() ? 0.0 : it->second;
  };
  RunTotals t;
  t.trainSeconds = get("train_seconds");
  t.trainImages = static_cast<int64_t>(get("train_images"));
  t.elapsedS = get("elapsed_s");
  t.bestAccuracy = get("best_accuracy");
  t.finalAccuracy = get("final_accuracy");
  t.reachedTarget = get("reached_target") != 0;
  t.timeToTargetS = t.reachedTarget ? get("time_to_target_s") : -1;
  t.firstLoss = get("first_loss");
  t.lastLoss = get("last_loss");
  t.epochs = static_cast<int64_t>(get("epochs"));
  t.epochLoss = get("epoch_loss_sum");
  t.epochCorrect = get("epoch_correct");
  t.epochSeen = get("epoch_seen");
  t.epochSkipped = static_cast<int64_t>(get("epoch_skipped"));
  if (counters.count("loss_scale")) {
    t.lossScale = LossScalerState{get("loss_scale"),
                                  static_cast<int64_t>(get("loss_scale_clean_steps")),
                                  static_cast<int64_t>(get("loss_scale_overflows_left"))};
  }
  return t;
}

}  // namespace bigbatch::train_detail
