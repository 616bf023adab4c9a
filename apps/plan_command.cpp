#include "plan_command.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bigbatch/common/error.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/plan/allreduce_cost.h"
#include "bigbatch/plan/calibration.h"
#include "bigbatch/plan/cluster.h"
#include "bigbatch/plan/device_curve.h"
#include "bigbatch/plan/model_gradients.h"
#include "bigbatch/plan/published_records.h"
#include "bigbatch/plan/step_model.h"
#include "list_arg.h"

namespace bigbatch {
namespace {

using nlohmann::ordered_json;
constexpr double kMiB = 1024.0 * 1024.0;

std::string humanTime(double s) {
  if (s < 120) return fmt::format("{:.1f} s", s);
  if (s < 7200) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.2f} h", s / 3600);
}

std::vector<int> parseDevices(const std::string& text) {
  std::vector<int> counts;
  for (const auto& item : splitList(text)) {
    size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(item, &used);
    } catch (const std::exception&) {
    }
    BIGBATCH_REQUIRE(used == item.size() && n >= 1, InvalidArgument,
                     "--devices '{}': give whole numbers >= 1, e.g. --devices 8,64,512,2048", item);
    counts.push_back(n);
  }
  BIGBATCH_REQUIRE(!counts.empty(), InvalidArgument,
                   "--devices is empty; e.g. --devices 8 or --devices 8,64,512,2048");
  return counts;
}

// --model's options: the Fashion-MNIST shape for cnn and resnet, ImageNet's
// for resnet50.
// --model: a zoo model by name, or a TorchScript module file (a model
// written in Python, as model.name = "torchscript" trains it).
ModelOptions modelOptionsOf(const PlanArgs& a) {
  ModelOptions options;
  if (a.model != "cnn" && a.model != "resnet" && a.model != "resnet50") {
    BIGBATCH_REQUIRE(std::filesystem::exists(a.model), InvalidArgument,
                     "--model '{}': choose cnn, resnet or resnet50, name a TorchScript module "
                     "file (torch.jit.script(model).save(FILE)), or give --grad-mb",
                     a.model);
    options.name = "torchscript";
    options.path = a.model;
  } else {
    options.name = a.model;
  }
  options.inChannels = a.channels > 0 ? a.channels : (a.model == "resnet50" ? 3 : 1);
  options.numClasses = a.numClasses > 0 ? a.numClasses : (a.model == "resnet50" ? 1000 : 10);
  return options;
}

// The gradient tensors, backward order, in bytes on the wire; and a label.
std::vector<double> gradientBytes(const PlanArgs& a, std::string& label) {
  BIGBATCH_REQUIRE(a.precision == "fp32" || a.precision == "fp16", InvalidArgument,
                   "--precision '{}': choose fp32 or fp16 (the gradient on the wire)", a.precision);
  const double elementBytes = a.precision == "fp16" ? 2 : 4;
  if (a.gradMb > 0) {
    label = fmt::format("a {:.1f} MB gradient", a.gradMb);
    return plan::uniformTensors(a.gradMb * 1e6);
  }
  const ModelOptions options = modelOptionsOf(a);
  const std::vector<double> elements = plan::gradientElements(options);
  double values = 0;
  std::vector<double> bytes;
  for (double e : elements) {
    bytes.push_back(e * elementBytes);
    values += e;
  }
  label = fmt::format("{} ({} classes: {:.2f} M parameters in {} tensors, {:.1f} MB {} gradient)",
                      a.model, options.numClasses, values / 1e6, elements.size(),
                      values * elementBytes / 1e6, a.precision);
  return bytes;
}

// One device's training rate measured here: `steps` timed SGD steps (after
// two untimed ones) of --model on random inputs at --batch-per-device, on
// this machine's CPU with --threads threads.
double profileDeviceRate(const PlanArgs& a) {
  BIGBATCH_REQUIRE(a.gradMb <= 0, InvalidArgument,
                   "--profile measures a bigbatch model; drop --grad-mb and give --model");
  BIGBATCH_REQUIRE(a.batchPerDevice >= 1, InvalidArgument,
                   "--profile needs --batch-per-device, the batch to time");
  if (a.threads > 0) torch::set_num_threads(a.threads);
  torch::manual_seed(1);
  const ModelOptions options = modelOptionsOf(a);
  const int64_t side = a.imageSize > 0 ? a.imageSize : (a.model == "resnet50" ? 224 : 28);
  auto model = buildModel(options);
  model->train();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  const auto x = torch::randn({a.batchPerDevice, options.inChannels, side, side});
  const auto y = torch::randint(options.numClasses, {a.batchPerDevice}, torch::kLong);
  auto step = [&] {
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    sgd.step();
  };
  step();
  step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.profileSteps; ++i) step();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return a.profileSteps * a.batchPerDevice / s;
}

ordered_json predictionJson(int devices, const plan::Cluster& c, const plan::StepInputs& in,
                            const plan::RunPrediction& r, const plan::Recommendation& rec,
                            const plan::DeviceCurve& curve) {
  const auto& s = r.step;
  return ordered_json{{"devices", devices},
                      {"nodes", c.nodes()},
                      {"device_img_s", in.deviceImgS},
                      {"device_fixed_s", curve.fixedS()},
                      {"device_per_image_s", curve.perImageS()},
                      {"img_s", s.imgS},
                      {"scaling_efficiency", s.scalingEfficiency},
                      {"step_time_s", s.stepS},
                      {"compute_s", s.computeS},
                      {"exchange_s", s.exchangeS},
                      {"exposed_exchange_s", s.exposedExchangeS},
                      {"sync_s", s.syncS},
                      {"exchange_ratio", s.exchangeS / s.computeS},
                      {"buckets", s.buckets},
                      {"allreduce", s.algorithm.empty() ? "none" : s.algorithm},
                      {"steps_per_epoch", r.stepsPerEpoch},
                      {"train_s", r.trainS},
                      {"eval_s", r.evalS},
                      {"time_to_train_s", r.timeToTrainS},
                      {"recommended_allreduce", devices > 1 ? rec.algorithm : "none"},
                      {"recommended_fusion_mb", rec.fusionBytes / kMiB},
                      {"recommended_img_s", rec.step.imgS}};
}

// The cluster of `n` devices: a --cluster preset, or the links the flags give.
plan::Cluster clusterOf(const PlanArgs& a, int n) {
  if (!a.cluster.empty()) return plan::clusterPreset(a.cluster, n);
  plan::Cluster c;
  c.devices = n;
  c.devicesPerNode = std::min(a.devicesPerNode, n);
  c.intra = {a.intraGbps, a.intraLatencyUs};
  c.inter = {a.interGbps, a.interLatencyUs};
  BIGBATCH_REQUIRE(n < a.devicesPerNode || n % a.devicesPerNode == 0, InvalidArgument,
                   "--devices {} is not a multiple of --devices-per-node {}: every node holds "
                   "the same number of devices",
                   n, a.devicesPerNode);
  return c;
}

int runPrediction(PlanArgs a) {
  if (a.profileSteps > 0) {
    const double measured = profileDeviceRate(a);
    a.deviceImgS = fmt::format("{}@{}", measured, a.batchPerDevice);
    if (!a.json)
      fmt::print("# profile: {} x {} steps at batch {} on this machine: {:.1f} img/s\n", a.model,
                 a.profileSteps, a.batchPerDevice, measured);
  }
  BIGBATCH_REQUIRE(!a.deviceImgS.empty(), InvalidArgument,
                   "--device-img-s is required: one device's training rate (images/s) at "
                   "--batch-per-device, or rates at several batches (rate@batch,...: `bigbatch "
                   "bench step --batch 16,64,256` prints them), from a benchmark of that device "
                   "or `bigbatch train` on one worker (its summary.json throughput_img_s); or "
                   "--profile N to measure it here");
  BIGBATCH_REQUIRE(a.batchPerDevice >= 1, InvalidArgument,
                   "--batch-per-device is required: the examples each device processes per step");
  const plan::DeviceCurve curve =
      plan::DeviceCurve::fit(plan::parseRatePoints(a.deviceImgS, a.batchPerDevice));
  const std::vector<int> counts = parseDevices(a.devices);
  if (a.allreduce.empty()) a.allreduce = a.cluster.empty() ? "auto" : "two_level";
  std::string label;
  plan::StepInputs in;
  in.tensorBytes = gradientBytes(a, label);
  in.deviceImgS = curve.imgS(a.batchPerDevice);
  in.batchPerDevice = a.batchPerDevice;
  in.fusionBytes = a.fusionMb * kMiB;
  in.allreduce = a.allreduce;
  in.backwardShare = a.backwardShare;
  in.optimizerShare = a.optimizerShare;
  in.jitter = a.jitter;
  in.overlap = !a.noOverlap;
  plan::RunInputs run{a.epochs, double(a.datasetSize), double(a.evalSize), a.evalEvery};
  plan::allreduceCost(a.allreduce, 1, plan::Cluster{});  // an unknown name fails here

  std::vector<ordered_json> rows;
  for (int n : counts) {
    const plan::Cluster c = clusterOf(a, n);
    const plan::RunPrediction r = plan::predictRun(in, c, run);
    rows.push_back(predictionJson(n, c, in, r, plan::recommend(in, c), curve));
    if (a.linkForRatio > 0)
      rows.back()["inter_gbps_for_ratio"] = plan::interGbpsForRatio(in, c, a.linkForRatio);
  }
  if (a.json) {
    for (const auto& row : rows) fmt::print("{}\n", row.dump());
    return 0;
  }
  fmt::print("# bigbatch plan: {}\n", label);
  fmt::print("# device: {:.1f} img/s at {} per device; {}\n", in.deviceImgS, a.batchPerDevice,
             curve.describe());
  const plan::Cluster shape = clusterOf(a, counts.back());
  fmt::print(
      "# links: intra {} Gb/s {} us ({}), inter {} Gb/s {} us per node of {} ({}{}); {} "
      "allreduce, {} MiB buckets, overlap {}, jitter {}\n",
      shape.intra.gbps, shape.intra.latencyUs, shape.intraReduction, shape.inter.gbps,
      shape.inter.latencyUs, shape.devicesPerNode, shape.interReduction,
      shape.interReduction == "in_network"
          ? fmt::format(", {} switch levels of {} us", shape.switchLevels, shape.switchLatencyUs)
          : std::string(),
      a.allreduce, a.fusionMb, a.noOverlap ? "off" : "on", a.jitter);
  fmt::print("# time to train: {} epochs of {} examples, evaluating {} every {} epoch(s)\n",
             a.epochs, a.datasetSize, a.evalSize, a.evalEvery);
  fmt::print("{:>8} {:>6} {:>12} {:>6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>18} {:>10}   {}\n",
             "devices", "nodes", "img/s", "eff", "step_ms", "comp_ms", "exch_ms", "expo_ms",
             "sync_ms", "allreduce", "to_train", "recommended");
  for (const auto& r : rows) {
    if (r.contains("inter_gbps_for_ratio")) {
      fmt::print(
          "# {} devices: an inter-node link of {:.4g} Gb/s per node makes the exchange "
          "{} x the compute (--link-for-ratio)\n",
          r["devices"].get<int>(), r["inter_gbps_for_ratio"].get<double>(), a.linkForRatio);
    }
    fmt::print(
        "{:>8} {:>6} {:>12.0f} {:>6.3f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>8.2f} "
        "{:>18} {:>10}   {} {:.0f} MiB ({:.0f} img/s)\n",
        r["devices"].get<int>(), r["nodes"].get<int>(), r["img_s"].get<double>(),
        r["scaling_efficiency"].get<double>(), r["step_time_s"].get<double>() * 1e3,
        r["compute_s"].get<double>() * 1e3, r["exchange_s"].get<double>() * 1e3,
        r["exposed_exchange_s"].get<double>() * 1e3, r["sync_s"].get<double>() * 1e3,
        r["allreduce"].get<std::string>(), humanTime(r["time_to_train_s"].get<double>()),
        r["recommended_allreduce"].get<std::string>(), r["recommended_fusion_mb"].get<double>(),
        r["recommended_img_s"].get<double>());
  }
  return 0;
}

int runCalibrate(const PlanArgs& a) {
  std::ifstream file(a.calibrate);
  BIGBATCH_REQUIRE(file.good(), IoError,
                   "cannot read '{}'; give the output of `mpirun ... bigbatch bench allreduce "
                   "--json` saved to a file",
                   a.calibrate);
  std::stringstream text;
  text << file.rdbuf();
  const auto samples = plan::parseBenchRows(text.str());
  plan::Cluster known;
  known.intra = {a.intraGbps, a.intraLatencyUs};
  known.inter = {a.interGbps, a.interLatencyUs};
  // One fit per algorithm, and one over all of them together ("all"): the
  // level a plan of this machine should use.
  std::vector<std::pair<std::string, std::vector<plan::AllreduceSample>>> groups;
  for (const auto& algorithm : plan::plannedAlgorithms()) {
    std::vector<plan::AllreduceSample> mine;
    for (const auto& s : samples)
      if (s.algorithm == algorithm) mine.push_back(s);
    if (!mine.empty()) groups.emplace_back(algorithm, mine);
  }
  if (groups.size() > 1) groups.emplace_back("all", samples);
  std::vector<ordered_json> rows;
  for (const auto& [algorithm, mine] : groups) {
    const plan::LinkFit fit = plan::fitLink(mine, known);
    const char* level = fit.interNode ? "inter" : "intra";
    rows.push_back({{"algorithm", algorithm},
                    {"ranks", mine.front().ranks},
                    {"local_ranks", mine.front().localRanks},
                    {"level", level},
                    {"latency_us", fit.level.latencyUs},
                    {"gbps", fit.level.gbps},
                    {"samples", fit.samples},
                    {"rms_relative_error", fit.rmsRelativeError},
                    {"max_relative_error", fit.maxRelativeError},
                    {"flags", fmt::format("--{}-latency-us {:.3g} --{}-gbps {:.4g}", level,
                                          fit.level.latencyUs, level, fit.level.gbps)}});
  }
  BIGBATCH_REQUIRE(!rows.empty(), InvalidArgument,
                   "'{}' has no rows of ring, halving_doubling, recursive_doubling or "
                   "hierarchical; run `bigbatch bench allreduce --json --algorithms ring,...`",
                   a.calibrate);
  if (a.json) {
    for (const auto& row : rows) fmt::print("{}\n", row.dump());
    return 0;
  }
  fmt::print("# α-β fit per algorithm (weighted least squares on relative error)\n");
  fmt::print("{:>20} {:>6} {:>6} {:>10} {:>10} {:>8} {:>8}   {}\n", "algorithm", "ranks", "level",
             "alpha_us", "Gb/s", "rms_err", "max_err", "flags");
  for (const auto& r : rows) {
    fmt::print("{:>20} {:>6} {:>6} {:>10.2f} {:>10.2f} {:>7.1f}% {:>7.1f}%   {}\n",
               r["algorithm"].get<std::string>(), r["ranks"].get<int>(),
               r["level"].get<std::string>(), r["latency_us"].get<double>(),
               r["gbps"].get<double>(), 100 * r["rms_relative_error"].get<double>(),
               100 * r["max_relative_error"].get<double>(), r["flags"].get<std::string>());
  }
  return 0;
}

int runPublished(const PlanArgs& a) {
  std::vector<ordered_json> rows;
  for (const auto& record : plan::publishedRecords()) {
    const std::vector<double> elements = plan::imageNetElements(record.model);
    const plan::RecordPrediction p = plan::predictRecord(record, elements);
    const plan::RecordPrediction free = plan::predictRecord(plan::withFreeLinks(record), elements);
    for (size_t i = 0; i < p.checks.size(); ++i) {
      const plan::RecordCheck& check = p.checks[i];
      rows.push_back({{"record", record.id},
                      {"model", record.model},
                      {"figure", check.figure},
                      {"published", check.published},
                      {"predicted", check.predicted},
                      {"ratio", check.ratio()},
                      {"within_20_percent", std::abs(check.ratio() - 1) <= 0.2},
                      {"free_links_ratio", free.checks[i].ratio()},
                      {"network_bound", record.published[i].networkBound},
                      {"rests_on", record.published[i].rests}});
    }
    if (a.json) continue;
    const auto& s = p.run.step;
    fmt::print("## {}\n# {}\n", record.id, record.citation);
    fmt::print("# {}: {} x {} ({} per node), {} per device at {:.1f} img/s\n", record.model,
               record.cluster.devices, record.device, record.cluster.devicesPerNode,
               record.batchPerDevice, record.deviceImgS);
    if (!record.devicePoints.empty()) {
      fmt::print("#   device curve: {}\n", plan::DeviceCurve::fit(record.devicePoints).describe());
    }
    for (const auto& source : record.sources) fmt::print("#   {}\n", source);
    fmt::print(
        "# predicted step {:.1f} ms = compute {:.1f} + exposed exchange {:.1f} (of {:.1f}) "
        "+ sync {:.1f}; {} buckets, {}\n",
        s.stepS * 1e3, s.computeS * 1e3, s.exposedExchangeS * 1e3, s.exchangeS * 1e3, s.syncS * 1e3,
        s.buckets, s.algorithm);
    for (size_t i = 0; i < p.checks.size(); ++i) {
      const plan::RecordCheck& check = p.checks[i];
      fmt::print(
          "{:>20}  published {:>12.4g}  predicted {:>12.4g}  ratio {:.3f}  (links free: {:.3f}; "
          "{})\n",
          check.figure, check.published, check.predicted, check.ratio(), free.checks[i].ratio(),
          record.published[i].networkBound
              ? "tests the network terms; also rests on " + record.published[i].rests
              : "rests on " + record.published[i].rests);
    }
    fmt::print("\n");
  }
  if (a.json)
    for (const auto& row : rows) fmt::print("{}\n", row.dump());
  return 0;
}

// The gradient: a model (or its file) and, with --profile, its measured rate.
void addModelOptions(CLI::App* plan, PlanArgs& a) {
  plan->add_option("--model", a.model,
                   "the gradient of a bigbatch model: cnn, resnet or resnet50 (ResNet-50 v1.5, "
                   "1000 classes: 25.6 M parameters), or a TorchScript module file (a model "
                   "from Python, as model.name = torchscript trains it)")
      ->capture_default_str();
  plan->add_option("--num-classes", a.numClasses,
                   "classes of --model (default: 1000 for resnet50, else 10)");
  plan->add_option("--grad-mb", a.gradMb,
                   "instead of --model: a gradient of this many MB (1e6 bytes) on the wire")
      ->check(CLI::PositiveNumber);
  plan->add_option("--profile", a.profileSteps,
                   "measure --device-img-s here instead: time N training steps of --model at "
                   "--batch-per-device on this machine's CPU (random inputs)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--image-size", a.imageSize,
                   "input side of --profile (default: 224 for resnet50, else 28)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--channels", a.channels,
                   "input channels of --profile (default: 3 for resnet50, else 1)")
      ->check(CLI::PositiveNumber);
  plan->add_option("--threads", a.threads, "threads of --profile (default: libtorch's)")
      ->check(CLI::PositiveNumber);
}

// The cluster: devices, their rate and batch, links, the exchange.
void addClusterOptions(CLI::App* plan, PlanArgs& a) {
  plan->add_option("--devices", a.devices,
                   "devices (ranks), or a comma-separated sweep, e.g. 8,64,512,2048")
      ->capture_default_str();
  plan->add_option("--devices-per-node", a.devicesPerNode,
                   "devices sharing a node (its intra-node links and one inter-node link)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  plan->add_option("--device-img-s", a.deviceImgS,
                   "one device's training rate in images/s at --batch-per-device, or rates at "
                   "several batches, RATE@BATCH,... (a fixed cost per step plus a cost per image "
                   "is fitted to them: the rate at any batch; `bench step --batch A,B,...` "
                   "prints them); required unless --profile, --published or --calibrate");
  plan->add_option("--batch-per-device", a.batchPerDevice,
                   "examples per device per step (required unless --published or --calibrate)");
  plan->add_option("--intra-gbps", a.intraGbps,
                   "intra-node bandwidth per device, Gb/s (NVLink, PCIe, shared memory)")
      ->capture_default_str();
  plan->add_option("--inter-gbps", a.interGbps,
                   "inter-node bandwidth per node, Gb/s (all its NICs together)")
      ->capture_default_str();
  plan->add_option("--intra-latency-us", a.intraLatencyUs,
                   "α of one intra-node message, microseconds")
      ->capture_default_str();
  plan->add_option("--inter-latency-us", a.interLatencyUs,
                   "α of one inter-node message, microseconds")
      ->capture_default_str();
  plan->add_option("--precision", a.precision, "the gradient on the wire: fp32 or fp16")
      ->capture_default_str();
  plan->add_option("--allreduce", a.allreduce,
                   "ring, halving_doubling, recursive_doubling, hierarchical (bigbatch's), "
                   "torus2d (the published runs' two-level scheme), two_level (NCCL's two "
                   "levels with the cluster's reductions: nvls, tree, in_network), or auto (the "
                   "cheapest of bigbatch's per bucket); default: auto, two_level with --cluster");
  CLI::Option* cluster = plan->add_option(
      "--cluster", a.cluster,
      "a named machine instead of --devices-per-node and the links: dgx-h100, dgx-a100, "
      "abci-v100, each with its reductions overridable per level: NAME,intra=ring|nvls,"
      "inter=ring|tree|in_network (docs/SCALE.md)");
  for (const char* flag : {"--devices-per-node", "--intra-gbps", "--inter-gbps",
                           "--intra-latency-us", "--inter-latency-us"}) {
    cluster->excludes(plan->get_option(flag));
  }
  plan->add_option("--fusion-mb", a.fusionMb, "bucket size cap in MiB (ddp.fusion_bytes)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

// One step's shape: what the exchange can overlap, stragglers.
void addStepOptions(CLI::App* plan, PlanArgs& a) {
  plan->add_option("--backward-share", a.backwardShare,
                   "share of one device's step spent in backward (the window the exchange can "
                   "overlap)")
      ->capture_default_str();
  plan->add_option("--optimizer-share", a.optimizerShare,
                   "share of one device's step spent in the optimizer step (after the exchange)")
      ->capture_default_str();
  plan->add_option("--jitter", a.jitter,
                   "coefficient of variation of one device's step time; the slowest of N costs "
                   "jitter·sqrt(2 ln N) of a step")
      ->capture_default_str();
  plan->add_option("--link-for-ratio", a.linkForRatio,
                   "also give the inter-node Gb/s at which the exchange takes this many times "
                   "the compute (exchange_ratio of another plan: reproduce a cluster's ratio "
                   "on scripts/emulated_cluster's links)")
      ->check(CLI::PositiveNumber);
  plan->add_flag("--no-overlap", a.noOverlap,
                 "exchange only after backward (default: buckets go as they fill)");
}

// The run: epochs and evaluations, for the time to train.
void addRunOptions(CLI::App* plan, PlanArgs& a) {
  plan->add_option("--epochs", a.epochs, "epochs of the run")->capture_default_str();
  plan->add_option("--dataset-size", a.datasetSize, "training examples per epoch (ImageNet-1k)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  plan->add_option("--eval-size", a.evalSize, "examples per evaluation (0: none)")
      ->capture_default_str();
  plan->add_option("--eval-every", a.evalEvery, "epochs between evaluations (0: none)")
      ->capture_default_str();
}

// What to print, and the other modes (--calibrate, --published).
void addOutputAndModes(CLI::App* plan, PlanArgs& a) {
  plan->add_flag("--json", a.json,
                 "one JSON object per device count (per fit with --calibrate, per figure with "
                 "--published) instead of the table");
  plan->add_option("--calibrate", a.calibrate,
                   "fit α and β to `bigbatch bench allreduce --json` rows in this file "
                   "(one host: the intra-node level; several: the inter-node level, the "
                   "intra-node one from --intra-*)");
  plan->add_flag("--published", a.published,
                 "predict seven published runs (five ResNet-50 records, Horovod's 512-GPU "
                 "VGG-16 and ResNet-101) from their stated hardware and show predicted vs "
                 "published, with links made free beside");
}

}  // namespace

CLI::App* addPlanCommand(CLI::App& app, PlanArgs& a) {
  auto* plan = app.add_subcommand(
      "plan",
      "predict img/s, scaling efficiency and time to train on a cluster (α-β model of the "
      "exchange, overlap with backward, stragglers); sweep device counts; recommend the "
      "allreduce and bucket size; fit α-β to measurements (--calibrate); validate against "
      "published runs (--published). docs/SCALE.md");
  addModelOptions(plan, a);
  addClusterOptions(plan, a);
  addStepOptions(plan, a);
  addRunOptions(plan, a);
  addOutputAndModes(plan, a);
  return plan;
}

int runPlan(const PlanArgs& a) {
  if (a.published) return runPublished(a);
  if (!a.calibrate.empty()) return runCalibrate(a);
  return runPrediction(a);
}

}  // namespace bigbatch
