// What a finished run reports: summary.json (its keys are an interface —
// docs and the Python example read them) and the closing line on the
// terminal. Internal to src/train; plain functions of values.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "bigbatch/train/trainer.h"

namespace bigbatch::train_detail {

// Facts of the run that TrainResult does not carry.
struct RunFacts {
  double initSeconds = 0;  // init_start .. run_start
  int64_t threadsPerRank = 1;
  int64_t accumulationSteps = 1;
  int64_t virtualWorkers = 1;
  std::string optimizer;
  double peakLr = 0;
  std::string precision;      // fp32 | bf16 | fp16
  std::string exchangeDtype;  // type on the wire
  bool lossScaling = false;
  double finalLossScale = 1.0;
  int64_t exchangeBytesPerStep = 0;
  std::string model;
  int64_t parameters = 0;
};

nlohmann::ordered_json summaryJson(const TrainResult& result, const RunFacts& facts);

// "reached target ... in N epochs: time to accuracy ..." or "target ... NOT
// reached ...", on stdout.
void printOutcome(const TrainResult& result, const RunFacts& facts);

}  // namespace bigbatch::train_detail
