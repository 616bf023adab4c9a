#include "run/run_state.h"

namespace bigbatch::train_detail {

std::map<std::string, double> RunState::toCounters(const StepTally& epochSums) const {
  std::map<std::string, double> c = {{"train_seconds", trainSeconds},
                                     {"train_images", static_cast<double>(trainImages)},
                                     {"best_accuracy", bestAccuracy},
                                     {"final_accuracy", finalAccuracy},
                                     {"best_top5", bestTop5},
                                     {"final_top5", finalTop5},
                                     {"reached_target", reachedTarget ? 1.0 : 0.0},
                                     {"time_to_target_s", timeToTargetS},
                                     {"first_loss", firstLoss},
                                     {"last_loss", lastLoss},
                                     {"epochs", static_cast<double>(epochsDone)},
                                     {"elapsed_s", elapsedS},
                                     {"epoch_loss_sum", epochSums.lossSum},
                                     {"epoch_correct", epochSums.correct},
                                     {"epoch_seen", epochSums.seen},
                                     {"epoch_skipped", static_cast<double>(epochSkipped)}};
  if (lossScale) {
    c["loss_scale"] = lossScale->scale;
    c["loss_scale_clean_steps"] = static_cast<double>(lossScale->cleanSteps);
    c["loss_scale_overflows_left"] = static_cast<double>(lossScale->overflowsLeft);
  }
  return c;
}

RunState RunState::fromCheckpoint(const Checkpoint& k, bool lead) {
  auto get = [&](const char* key) {
    auto it = k.counters.find(key);
    return it == k.counters.end() ? 0.0 : it->second;
  };
  RunState s;
  s.epoch = k.epoch;
  s.stepInEpoch = k.stepInEpoch;
  s.globalStep = k.globalStep;
  s.trainSeconds = get("train_seconds");
  s.trainImages = static_cast<int64_t>(get("train_images"));
  s.elapsedS = get("elapsed_s");
  s.epochsDone = static_cast<int64_t>(get("epochs"));
  s.bestAccuracy = get("best_accuracy");
  s.finalAccuracy = get("final_accuracy");
  s.bestTop5 = get("best_top5");
  s.finalTop5 = get("final_top5");
  s.reachedTarget = get("reached_target") != 0;
  s.timeToTargetS = s.reachedTarget ? get("time_to_target_s") : -1;
  s.firstLoss = get("first_loss");
  s.lastLoss = get("last_loss");
  if (lead) s.epochTally = {get("epoch_loss_sum"), get("epoch_correct"), get("epoch_seen")};
  s.epochSkipped = static_cast<int64_t>(get("epoch_skipped"));
  if (k.counters.count("loss_scale")) {
    s.lossScale =
        LossScalerState{get("loss_scale"), static_cast<int64_t>(get("loss_scale_clean_steps")),
                        static_cast<int64_t>(get("loss_scale_overflows_left"))};
  }
  return s;
}

void RunState::copyTo(TrainResult& r) const {
  r.bestAccuracy = bestAccuracy;
  r.finalAccuracy = finalAccuracy;
  r.bestTop5 = bestTop5;
  r.finalTop5 = finalTop5;
  r.reachedTarget = reachedTarget;
  r.timeToTargetS = timeToTargetS;
  r.firstLoss = firstLoss;
  r.lastLoss = lastLoss;
  r.epochs = epochsDone;
  r.steps = globalStep;
}

}  // namespace bigbatch::train_detail
