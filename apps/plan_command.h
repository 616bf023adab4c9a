// `bigbatch plan`: predicts img/s, scaling efficiency and time to train of a
// data-parallel run on a cluster described by its devices and links
// (src/plan/step_model.h), sweeps device counts, recommends the allreduce
// and bucket size, fits α-β to measured allreduce rows (--calibrate), and
// prints the validation against five published runs (--published).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace bigbatch {

struct PlanArgs {
  std::string model = "resnet50";  // cnn, resnet, resnet50, or a TorchScript file (ignored with --grad-mb)
  int numClasses = 0;              // 0: 1000 for resnet50, else 10
  double gradMb = 0;               // > 0: a gradient of this many MB (1e6 B) instead of a model
  std::string devices = "8";       // one count or a comma-separated sweep
  int devicesPerNode = 1;
  std::string deviceImgS;  // "X", or "X@B,Y@B2,..." (plan/device_curve.h)
  int batchPerDevice = 0;
  std::string cluster;     // a preset, plan/cluster.h clusterPreset(); "": the flags' links
  int profileSteps = 0;  // > 0: measure --device-img-s here (timed training steps)
  int imageSize = 0;     // of the profile's inputs; 0: 224 for resnet50, else 28
  int channels = 0;      // of the profile's inputs; 0: 3 for resnet50, else 1
  int threads = 0;       // of the profile; 0: libtorch's default
  double intraGbps = 200, interGbps = 100;
  double intraLatencyUs = 5, interLatencyUs = 5;
  std::string precision = "fp32";  // of the exchange: fp32 or fp16
  std::string allreduce;  // "": auto, or two_level on a --cluster
  double fusionMb = 25;  // MiB
  double backwardShare = 2.0 / 3.0, optimizerShare = 0, jitter = 0.02;
  bool noOverlap = false;
  double linkForRatio = 0;  // > 0: the inter-node Gb/s at which exchange_s / compute_s is this
  double epochs = 90;
  long long datasetSize = 1281167, evalSize = 50000;
  double evalEvery = 1;
  bool json = false;
  std::string calibrate;  // bench allreduce --json rows to fit
  bool published = false;
};

CLI::App* addPlanCommand(CLI::App& app, PlanArgs& args);
int runPlan(const PlanArgs& args);

}  // namespace bigbatch
