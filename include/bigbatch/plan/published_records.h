// Published large-scale ImageNet runs — five ResNet-50 records, Horovod's
// 512-GPU scaling on 25 Gb/s, and MLPerf Training v4.0's ResNet-50 on 8, 16
// and 64 H100 — with the hardware they state and
// the figures they report, against which `bigbatch plan` is validated
// (`bigbatch plan --published`, docs/SCALE.md). Every input carries its
// source; nothing is fitted per record — all use the same step model and
// the same jitter. Each figure says what it tests: whether it leaves ±20 %
// when every link is made free (withFreeLinks), i.e. whether it tests the
// network terms at all. Plain data; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "bigbatch/plan/cluster.h"
#include "bigbatch/plan/device_curve.h"
#include "bigbatch/plan/step_model.h"

namespace bigbatch::plan {

struct PublishedFigure {
  std::string name;  // "img_s", "time_to_train_s", "scaling_efficiency"
  double value = 0;
  std::string note;  // where it is stated
  // Whether the check tests the network terms: with every link free the
  // prediction leaves ±20 % (a test asserts this either way).
  bool networkBound = false;
  // What else the figure rests on, for docs/SCALE.md and `plan --published`.
  std::string rests;
};

struct PublishedRecord {
  std::string id;                  // e.g. "goyal2017"
  std::string citation;            // authors, year, title, arXiv id
  std::string device;              // e.g. "P100 (SXM2)"
  std::string model = "resnet50";  // imageNetElements()'s name
  Cluster cluster;
  double deviceImgS = 0;             // at batchPerDevice
  std::vector<RatePoint> devicePoints;  // the curve deviceImgS comes from; empty: one rate
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

// The record on links of infinite bandwidth and no latency: what is left
// of each prediction is compute, jitter and the device rate.
PublishedRecord withFreeLinks(PublishedRecord record);

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

// `gradientElements`: the record's model's gradient tensors in the order
// backward produces them, as element counts: imageNetElements(record.model)
// (model_gradients.h).
RecordPrediction predictRecord(const PublishedRecord& record,
                               const std::vector<double>& gradientElements);

}  // namespace bigbatch::plan
