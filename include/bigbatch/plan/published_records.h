// Five published large-scale ResNet-50/ImageNet runs, with the hardware they
// state and the figures they report, against which `bigbatch plan` is
// validated (`bigbatch plan --published`, docs/SCALE.md). Every input carries
// its source; nothing is fitted per record — all five use the same model and
// the same jitter. Plain data; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "bigbatch/plan/cluster.h"
#include "bigbatch/plan/step_model.h"

namespace bigbatch::plan {

struct PublishedFigure {
  std::string name;  // "img_s", "time_to_train_s", "scaling_efficiency"
  double value = 0;
  std::string note;  // where it is stated
};

struct PublishedRecord {
  std::string id;        // e.g. "goyal2017"
  std::string citation;  // authors, year, title, arXiv id
  std::string device;    // e.g. "P100 (SXM2)"
  Cluster cluster;
  double deviceImgS = 0;
  int batchPerDevice = 0;
  bool fp16Exchange = false;
  double fusionBytes = 0;
  std::string allreduce;
  RunInputs run;
  // Scaling efficiency is reported against this many devices (the paper's
  // baseline; 1 = one device).
  int scalingBaseline = 1;
  std::vector<std::string> sources;  // one line per input: what and where from
  std::vector<PublishedFigure> published;
};

std::vector<PublishedRecord> publishedRecords();

// A record's prediction and each published figure beside it.
struct RecordCheck {
  std::string figure;
  double published = 0;
  double predicted = 0;
  double ratio() const { return predicted / published; }
};
struct RecordPrediction {
  StepInputs step;
  RunPrediction run;
  double scalingEfficiency = 0;  // against the record's scalingBaseline
  std::vector<RecordCheck> checks;
};

// `gradientElements`: ResNet-50's (1000 classes) gradient tensors in the
// order backward produces them, as element counts (model_gradients.h).
RecordPrediction predictRecord(const PublishedRecord& record,
                               const std::vector<double>& gradientElements);

}  // namespace bigbatch::plan
