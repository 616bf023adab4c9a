#include "run/run_recorder.h"

#include <fstream>

namespace bigbatch::train_detail {
namespace {

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

}  // namespace

RunRecorder::RunRecorder() : initStart_(Clock::now()) {}

void RunRecorder::attach(RunDir* runDir, bool prints) {
  runDir_ = runDir;
  prints_ = prints;
}

void RunRecorder::initStart() {
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kCacheClear, true);
  BIGBATCH_MLLOG_START(ml_, mlkey::kInitStart);
}

void RunRecorder::recipe(const RunRecipe& r, int worldSize, int64_t trainSamples,
                         int64_t evalSamples, int64_t decaySteps) {
  const MlperfSubmission& m = r.mlperf;
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kSubmissionBenchmark, m.benchmark);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kSubmissionOrg, m.org);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kSubmissionDivision, m.division);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kSubmissionStatus, m.status);
  BIGBATCH_MLLOG_POINT(
      ml_, mlkey::kSubmissionPlatform,
      m.platform.empty() ? fmt::format("{}x{}", worldSize, cpuModel()) : m.platform);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kSeed, r.seed);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kGlobalBatchSize, r.globalBatch);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kGradientAccumulationSteps, r.accumulation);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kTrainSamples, trainSamples);
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kEvalSamples, evalSamples);
  logOptimizer(ml_, r, decaySteps);
  BIGBATCH_MLLOG_POINT(ml_, "model_bn_span", std::max<int64_t>(1, r.batchPerRank / r.step.groups));
}

void RunRecorder::runStart() {
  BIGBATCH_MLLOG_END(ml_, mlkey::kInitStop);
  BIGBATCH_MLLOG_START(ml_, mlkey::kRunStart);
  initSeconds_ = std::chrono::duration<double>(Clock::now() - initStart_).count();
  runStarted_ = true;
  progress_ = Progress(prints_);
}

void RunRecorder::epochStart(int64_t epoch, int64_t epochs, int64_t steps) {
  BIGBATCH_MLLOG_START(ml_, mlkey::kBlockStart, {{"first_epoch_num", epoch}, {"epoch_count", 1}});
  BIGBATCH_MLLOG_START(ml_, mlkey::kEpochStart, {{"epoch_num", epoch}});
  progress_.startEpoch(epoch, epochs, steps);
}

void RunRecorder::epochStop(int64_t epoch) {
  progress_.finishEpoch();
  BIGBATCH_MLLOG_END(ml_, mlkey::kEpochStop, {{"epoch_num", epoch}});
}

void RunRecorder::evalStart(int64_t epoch) {
  BIGBATCH_MLLOG_START(ml_, mlkey::kEvalStart, {{"epoch_num", epoch}});
}

void RunRecorder::evalResult(int64_t epoch, double top1, double top5) {
  BIGBATCH_MLLOG_POINT(ml_, mlkey::kEvalAccuracy, top1, {{"epoch_num", epoch}, {"top5", top5}});
  BIGBATCH_MLLOG_END(ml_, mlkey::kEvalStop, {{"epoch_num", epoch}});
}

void RunRecorder::epochRecord(const EpochRecord& r, int64_t epochs) {
  BIGBATCH_MLLOG_END(ml_, mlkey::kBlockStop, {{"first_epoch_num", r.epoch}});
  if (runDir_) runDir_->appendMetrics(metricsColumns(), metricsRow(r));
  if (prints_) printEpochLine(r, epochs);
}

void RunRecorder::runStop(const char* status) {
  if (!runStarted_ || runStopped_.exchange(true)) return;
  BIGBATCH_MLLOG_END(ml_, mlkey::kRunStop, {{"status", status}});
}

void RunRecorder::closeMlperf(const char* status) {
  runStop(status);
  ml_.close();
}

void RunRecorder::summary(const TrainResult& result, const RunFacts& facts) {
  if (runDir_) runDir_->writeJson("summary.json", summaryJson(result, facts));
  if (prints_) printOutcome(result, facts);
}

}  // namespace bigbatch::train_detail
