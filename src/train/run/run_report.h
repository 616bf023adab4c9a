// What a run reports: per epoch, a metrics.csv row and a line on the
// terminal; at the end, summary.json and the closing line. The columns and
// keys are an interface (docs, tests and the Python example read them).
// Internal to src/train; plain functions of values.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bigbatch/train/trainer.h"
#include "step/train_step.h"

namespace bigbatch::train_detail {

// One epoch, as metrics.csv and the terminal show it. Losses, accuracies
// and images are over all ranks; `times` is rank 0's step-time breakdown.
struct EpochRecord {
  int64_t epoch = 0;
  int64_t step = 0;  // optimizer steps done in the run
  double lr = 0;     // of the epoch's last step
  double momentum = 0;
  double trainLoss = 0;
  double trainAcc = 0;               // fraction
  std::optional<double> testAcc;     // top-1, fraction; none on epochs without evaluation
  std::optional<double> testTop5;    // top-5, likewise
  double epochTimeS = 0;             // training, the slowest rank
  double imgS = 0;
  double elapsedS = 0;               // since run_start, over every resume
  StepTimes times;
  double commWaitMinS = 0;           // exposed exchange, min and max over the ranks
  double commWaitMaxS = 0;
  double evalS = 0;
  int64_t globalBatch = 0;           // under the batch-size schedule
  int64_t skippedSteps = 0;
  double lossScale = 1.0;            // 1 when loss scaling is off
};

// metrics.csv's header, and one epoch's row in that order.
const std::vector<std::string>& metricsColumns();
std::vector<std::string> metricsRow(const EpochRecord& r);

// "epoch   3/10  loss ...  test ...  elapsed ..." on stdout.
void printEpochLine(const EpochRecord& r, int64_t epochs);

// Facts of the run that TrainResult does not carry.
struct RunFacts {
  double initSeconds = 0;  // init_start .. run_start
  int64_t threadsPerRank = 1;
  int64_t allowedCpusPerRank = 1;  // the fewest CPUs any rank may run on (its affinity)
  std::string device = "cpu";      // rank 0's: "cpu" or "cuda:0 (NVIDIA H200, 140 GiB)"
  int64_t accumulationSteps = 1;
  int64_t virtualWorkers = 1;
  std::string optimizer;
  bool kfac = false;  // optim.kfac
  double peakLr = 0;
  std::string precision;      // fp32 | bf16 | fp16
  std::string exchangeDtype;  // type on the wire
  bool lossScaling = false;
  double finalLossScale = 1.0;
  int64_t exchangeBytesPerStep = 0;  // once compression has started
  std::string compression = "none";  // ddp.compression
  double compressionRatio = 1.0;     // fp32 bytes of the gradient / exchangeBytesPerStep
  std::string partition = "none";   // ddp.partition in effect (none on one rank)
  int64_t fusionBytes = 0;          // the bucket cap at the end (autotuning's choice under auto)
  int64_t optimizerStateBytes = 0;  // rank 0's optimizer state (1/N of it when partitioned)
  std::string model;
  int64_t parameters = 0;
  // This session's checkpoints (a resumed run's since its resume) and the
  // seconds its steps waited for them, the final one's write included.
  int64_t checkpoints = 0;
  double checkpointWaitS = 0;
  bool checkpointBackground = true;  // ckpt.background
  std::vector<std::string> allreduceTuned;  // the choices online tuning settled (comm.allreduce_tune)
};

nlohmann::ordered_json summaryJson(const TrainResult& result, const RunFacts& facts);

// "reached target ... in N epochs: time to accuracy ..." or "target ... NOT
// reached ...", on stdout.
void printOutcome(const TrainResult& result, const RunFacts& facts);

}  // namespace bigbatch::train_detail
