#include "bigbatch/plan/published_records.h"

#include <algorithm>
#include <string>
#include <utility>

#include "bigbatch/plan/device_curve.h"

namespace bigbatch::plan {
namespace {

constexpr double kGbps = 1.0;
constexpr double kMiB = 1024.0 * 1024.0;

// Device rates, the same for every record that uses the device.
//
// P100, fp32, 32 images per GPU: Goyal et al.'s 8-GPU baseline trains the 90
// epochs in 29 hours: 90 × 1,281,167 / (29 × 3600 s) / 8 = 138.1 img/s per GPU.
constexpr double kP100ImgS = 90.0 * 1281167 / (29.0 * 3600) / 8;
// P40, fp32: no ResNet-50 training figure at hand, so the P100 rate scaled by
// the fp32 peaks of NVIDIA's data sheets (P40 11.76 TFLOPS, P100 SXM2 10.6).
constexpr double kP40ImgS = kP100ImgS * 11.76 / 10.6;
// V100, mixed precision: NVIDIA DeepLearningExamples, MxNet/Classification/
// RN50v1.5/README.md as first released (mxnet-18.12-py3 container, Dec 2018,
// contemporary with both V100 records): 1 V100 16 GB, FP16, batch 208:
// 1,442.6 img/s. At a smaller per-GPU batch the training rate is taken to
// fall as that README's FP16 inference rate does: 2,954 img/s at 32, 3,428
// at 64 (linear in between), 3,832 at 208.
double v100ImgS(int batch) {
  const double at = batch <= 32 ? 2954 : 2954 + (3428 - 2954) * (batch - 32) / 32.0;
  return 1442.6 * at / 3832.0;
}

// P100, fp32, 64 images per GPU, TensorFlow's tf_cnn_benchmarks on synthetic
// data (tensorflow.org/performance/benchmarks, DGX-1 P100, May 2017): VGG16
// 154 img/s, ResNet-50 219, ResNet-152 91.8. ResNet-101 is not listed: its
// time per image is interpolated between ResNet-50's and ResNet-152's by
// FLOPs (He et al. 2016, Table 1: 3.8, 7.6 and 11.3 x 10^9).
constexpr double kP100Vgg16ImgS = 154;
constexpr double kP100Resnet101ImgS =
    1.0 / (1.0 / 219 + (1.0 / 91.8 - 1.0 / 219) * (7.6 - 3.8) / (11.3 - 3.8));

const char* kLatencySource =
    "latency: 5 us per message inside a node and over InfiniBand/RoCE, 20 us over TCP "
    "Ethernet (one rule for every record, typical of NCCL/MPI steps on such fabrics)";
const char* kShareSource =
    "backward 2/3 of a step's compute (twice the forward's FLOPs), jitter 2 %, buckets of "
    "25 MiB, readiness proportional to bytes (the model's defaults, the same for every record)";

// What every record shares: ResNet-50 for 90 epochs, reduced in two levels
// (inside the node, across the nodes, back: torus2d) in the model's default
// 25 MiB buckets, with the latency and share rules above among its sources.
PublishedRecord twoLevelRun(std::string id, std::string citation, std::string device, int devices,
                            int perNode, LinkLevel intra, LinkLevel inter, double deviceImgS,
                            int batchPerDevice, bool fp16Exchange) {
  PublishedRecord r;
  r.id = std::move(id);
  r.citation = std::move(citation);
  r.device = std::move(device);
  r.cluster.devices = devices;
  r.cluster.devicesPerNode = perNode;
  r.cluster.intra = intra;
  r.cluster.inter = inter;
  r.deviceImgS = deviceImgS;
  r.batchPerDevice = batchPerDevice;
  r.fp16Exchange = fp16Exchange;
  r.allreduce = "torus2d";
  r.fusionBytes = 25 * kMiB;
  r.run.epochs = 90;
  return r;
}

PublishedRecord goyal2017() {
  PublishedRecord r = twoLevelRun(
      "goyal2017",
      "Goyal et al. 2017, Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour, "
      "arXiv:1706.02677",
      "P100 (SXM2), fp32", 256, 8, {160 * kGbps, 5}, {50 * kGbps, 20}, kP100ImgS, 32, false);
  r.scalingBaseline = 8;
  r.sources = {
      "256 P100 in 32 Big Basin servers of 8, 50 Gb/s Ethernet per server, 32 images per "
      "GPU (batch 8k), fp32, 90 epochs: the paper",
      "138.1 img/s per GPU: the paper's 8-GPU baseline, 90 epochs in 29 hours",
      "intra-node 160 Gb/s: one NVLink 1.0 link, 20 GB/s per direction, per ring hop",
      "allreduce: two-level (the paper reduces inside the server, then across servers): torus2d",
      kLatencySource,
      kShareSource};
  r.published = {{"scaling_efficiency", 0.90, "~90 % from 8 to 256 GPUs (abstract)", false,
                  "the straggler term (2 % jitter); the links move it by under 2 %"},
                 {"time_to_train_s", 3600, "1 hour for 90 epochs (title, abstract)", false,
                  "the device rate, derived from this paper's own 8-GPU time: circular, it "
                  "checks only epochs x images / rate and the straggler term"}};
  return r;
}

PublishedRecord akiba2017() {
  PublishedRecord r = twoLevelRun(
      "akiba2017",
      "Akiba, Suzuki, Fukuda 2017, Extremely Large Minibatch SGD: Training ResNet-50 on "
      "ImageNet in 15 Minutes, arXiv:1711.04325",
      "P100, fp32", 1024, 8, {96 * kGbps, 5}, {112 * kGbps, 5}, kP100ImgS, 32, false);
  r.sources = {
      "1024 P100 in 128 nodes of 8 (MN-1), batch 32k = 32 per GPU, 90 epochs: the paper",
      "inter-node 2 x FDR InfiniBand, 56 Gb/s each, per node: PFN's MN-1 description "
      "(tech.preferred.jp, 'MN-1: a GPU cluster behind 15-min ImageNet')",
      "138.1 img/s per GPU: Goyal et al.'s P100 rate at the same 32 images per GPU",
      "intra-node 96 Gb/s: PCIe 3.0 x16, ~12 GB/s (assumed)",
      "allreduce: two-level (ChainerMN: NCCL inside the node, MPI ring across nodes): torus2d",
      kLatencySource,
      kShareSource};
  r.published = {{"time_to_train_s", 900, "15 minutes for 90 epochs (title, abstract)", false,
                  "Goyal et al.'s P100 rate and the straggler term"},
                 {"scaling_efficiency", 0.80, "~80 % at 1024 GPUs", false, "the straggler term"}};
  return r;
}

PublishedRecord jia2018() {
  PublishedRecord r = twoLevelRun(
      "jia2018",
      "Jia et al. 2018, Highly Scalable Deep Learning Training System with Mixed-Precision: "
      "Training ImageNet in Four Minutes, arXiv:1807.11205",
      "P40, fp32 compute, fp16 exchange", 2048, 8, {96 * kGbps, 5}, {100 * kGbps, 5}, kP40ImgS, 32,
      true);
  r.sources = {
      "2048 P40 in 256 nodes of 8, 100 Gb/s Ethernet per node, batch 64k = 32 per GPU, "
      "mixed precision, hierarchical all-reduce with tensor fusion (torus2d): the paper",
      "153.1 img/s per GPU: the P100 rate x 11.76/10.6 (fp32 peaks, NVIDIA data sheets)",
      "intra-node 96 Gb/s: PCIe 3.0 x16 (the P40 has no NVLink)",
      "90 epochs: the standard ResNet-50 budget (assumed)",
      kLatencySource,
      kShareSource};
  r.published = {{"time_to_train_s", 396, "6.6 minutes (abstract)", false,
                  "the P40 rate, the P100's scaled by fp32 peaks (an assumption)"},
                 {"scaling_efficiency", 0.879, "87.9 % at 2048 GPUs", false, "the straggler term"}};
  return r;
}

// ABCI: 4 V100 (SXM2) per node, two NVLink 2.0 links between each pair, two
// EDR InfiniBand links per node.
constexpr LinkLevel kAbciIntra{400 * kGbps, 5}, kAbciInter{200 * kGbps, 5};

PublishedRecord mikami2018() {
  PublishedRecord r = twoLevelRun(
      "mikami2018",
      "Mikami et al. 2018, Massively Distributed SGD: ImageNet/ResNet-50 Training in a Flash "
      "(first version: ImageNet/ResNet-50 Training in 224 Seconds), arXiv:1811.05233",
      "V100 (SXM2), mixed precision", 1088, 4, kAbciIntra, kAbciInter, v100ImgS(32), 32, true);
  r.sources = {
      "1088 V100 on ABCI (272 nodes of 4), 2 x InfiniBand EDR (100 Gb/s) per node, 32 "
      "images per GPU, fp16, 2D-torus all-reduce (reduce-scatter inside the node, all-reduce "
      "across, all-gather inside = torus2d): the paper",
      "V100 rate at 32 per GPU: 1,442.6 img/s (NVIDIA DeepLearningExamples MXNet RN50 v1.5, "
      "mxnet-18.12, FP16, batch 208) x 2,954/3,832 (the same README's FP16 inference rate "
      "at 32 vs 208)",
      "intra-node 400 Gb/s: two NVLink 2.0 links (25 GB/s each) between each pair of an ABCI "
      "node's 4 V100",
      kLatencySource, kShareSource};
  r.published = {{"scaling_efficiency", 0.9162, "91.62 % with 1088 GPUs", false,
                  "the straggler term; the links lower the prediction by 15 %, but with free "
                  "links it still passes"}};
  return r;
}

PublishedRecord yamazaki2019() {
  PublishedRecord r = twoLevelRun(
      "yamazaki2019",
      "Yamazaki et al. 2019, Yet Another Accelerated SGD: ResNet-50 Training on ImageNet in "
      "74.7 seconds, arXiv:1903.12650",
      "V100 (SXM2), mixed precision", 2048, 4, kAbciIntra, kAbciInter, v100ImgS(40), 40, true);
  r.sources = {
      "2048 V100 on ABCI (512 nodes of 4), batch 81,920 = 40 per GPU, fp16 compute and "
      "exchange, hierarchical reduction (torus2d): the paper",
      "V100 rate at 40 per GPU: 1,442.6 img/s x 3,072.5/3,832 (the README's FP16 inference "
      "rate interpolated at 40 vs 208)",
      "ABCI links as for Mikami et al.",
      "90 epochs (assumed: the standard budget)",
      kLatencySource,
      kShareSource};
  // Both figures also rest on the V100 rate's scaling to 40 per GPU by
  // inference-rate ratios, a rule no source gives: with 1,442.6 img/s
  // unscaled they predict 1.25x and 0.72x (outside ±20 %).
  const char* v100 =
      "the V100 rate at 40 per GPU, scaled from batch 208 by inference-rate "
      "ratios (assumed; unscaled, this figure fails)";
  r.published = {{"img_s", 1.73e6, "over 1.73 M images/s (abstract)", true, v100},
                 {"time_to_train_s", 74.7, "74.7 s (title, abstract)", true, v100}};
  return r;
}

// Horovod's 512-GPU benchmark (its README and docs/benchmarks.rst): 128
// servers of 4 Pascal GPUs, a RoCE-capable 25 Gbit/s network, 90 % scaling
// efficiency for Inception V3 and ResNet-101 and 68 % for VGG-16, run with
// tf_cnn_benchmarks at 64 images per GPU, fp32, NCCL 2's ring over every
// GPU, in Horovod's 64 MiB fusion buffer.
PublishedRecord horovod2018(std::string id, std::string model, double deviceImgS,
                            std::string rateSource, double efficiency, bool networkBound,
                            std::string rests) {
  PublishedRecord r;
  r.id = std::move(id);
  r.citation =
      "Sergeev & Del Balso 2018, Horovod: fast and easy distributed deep learning in "
      "TensorFlow, arXiv:1802.05799; the 512-GPU benchmark of Horovod's README";
  r.device = "P100 (Pascal), fp32";
  r.model = std::move(model);
  r.cluster.devices = 512;
  r.cluster.devicesPerNode = 4;
  r.cluster.intra = {96 * kGbps, 5};
  r.cluster.inter = {25 * kGbps, 5};
  r.deviceImgS = deviceImgS;
  r.batchPerDevice = 64;
  r.fp16Exchange = false;
  r.allreduce = "ring";
  r.fusionBytes = 64 * kMiB;
  r.run.epochs = 90;
  r.sources = {
      "512 Pascal GPUs in 128 servers of 4, RoCE-capable 25 Gbit/s network: Horovod's README "
      "(docs/benchmarks.rst)",
      "64 images per GPU, fp32, synthetic data: the benchmark's tf_cnn_benchmarks command "
      "(--batch_size 64, no fp16 allreduce)",
      std::move(rateSource),
      "P100 taken for 'Pascal' (not stated); intra-node 96 Gb/s: PCIe 3.0 x16 (assumed)",
      "allreduce: NCCL 2's ring over all 512 GPUs (Horovod's default then; hierarchical "
      "allreduce came later as an option): ring",
      "fusion buffer 64 MiB: Horovod's HOROVOD_FUSION_THRESHOLD default",
      kLatencySource,
      "backward 2/3 of a step's compute, jitter 2 %, readiness proportional to bytes (the "
      "model's defaults)"};
  r.published = {{"scaling_efficiency", efficiency,
                  "scaling efficiency at 512 GPUs against one (README)", networkBound,
                  std::move(rests)}};
  return r;
}

PublishedRecord horovodVgg16() {
  return horovod2018(
      "horovod2018_vgg16", "vgg16", kP100Vgg16ImgS,
      "154 img/s per GPU: tf_cnn_benchmarks' VGG16 on one DGX-1 P100, batch 64, synthetic "
      "(tensorflow.org/performance/benchmarks, May 2017)",
      0.68, true, "P100's VGG16 rate; the 25 Gb/s ring carries 553 MB of fp32 gradient a step");
}

PublishedRecord horovodResnet101() {
  return horovod2018(
      "horovod2018_resnet101", "resnet101", kP100Resnet101ImgS,
      "128.7 img/s per GPU: between tf_cnn_benchmarks' ResNet-50 (219) and ResNet-152 (91.8) "
      "on one DGX-1 P100 at batch 64, the time per image interpolated by FLOPs (He et al. "
      "2016: 3.8, 7.6, 11.3 GFLOPs)",
      0.90, false,
      "the straggler term and the overlap: 178 MB a step hides behind backward, free links "
      "gain 6 %");
}

// MLPerf Training v4.0's ResNet-50 on H100 (mlcommons/training_results_v4.0,
// commit 62f111b7: each system's resnet/result_*.txt, its systems/*.json):
// NVIDIA's MXNet code with Horovod and LARS, global batch 3,200 on 8, 16 and
// 64 GPUs, 35 epochs to 75.9 % top-1, evaluating 50,000 images every 4
// epochs. The figure is the median time from run_start to run_stop over a
// system's successful runs (it includes the evaluations).
//
// The device: H100 SXM's rate as a function of its batch (device_curve.h),
// fitted to two steady-state rates the same logs give (tracked_stats'
// throughput, the median over epochs 2..35 and over the 5 runs): 57,289.6
// img/s on NVIDIA's 1-node Eos (8 GPUs at 400: 7,161.2 a GPU) and 314,129.2
// on its 8-node Eos (64 GPUs at 50: 4,908.3 a GPU). The 8-node rate is
// taken as the device's at 50 although it was measured on 64 devices: the
// model's own exchange there is ~0.3 ms of a 10 ms step and its straggler
// term ~6 % — both counted again when the 64-GPU run is predicted, so that
// figure rests on its own rate (said in its `rests`).
std::vector<RatePoint> h100Points() { return {{7161.2, 400}, {4908.3, 50}}; }

PublishedRecord mlperfH100(std::string id, std::string system, int devices, int batch,
                           double timeS, std::string measured, std::string rests) {
  PublishedRecord r;
  r.id = std::move(id);
  r.citation = "MLPerf Training v4.0, ResNet-50 closed division, " + system +
               " (mlcommons/training_results_v4.0, commit 62f111b7)";
  r.device = "H100 SXM 80 GB, mixed precision";
  r.cluster = clusterPreset("dgx-h100,inter=tree", devices);
  r.devicePoints = h100Points();
  r.deviceImgS = DeviceCurve::fit(r.devicePoints).imgS(batch);
  r.batchPerDevice = batch;
  r.fp16Exchange = true;
  r.allreduce = "two_level";
  r.fusionBytes = 64 * kMiB;  // Horovod's default fusion buffer
  r.run.epochs = 35;
  r.run.evalEveryEpochs = 4;
  r.sources = {
      system + ": " + std::to_string(devices) + " H100 (" +
          std::to_string(r.cluster.nodes()) + " node(s) of 8), global batch 3,200 = " +
          std::to_string(batch) + " a GPU, 35 epochs; " + measured,
      "device: step = fixed + B x per image fitted to 7,161.2 img/s at 400 (Eos, 1 node) and "
      "4,908.3 at 50 (Eos, 8 nodes): the steady-state throughput NVIDIA's logs give "
      "(tracked_stats, median over epochs 2..35 and 5 runs) over the GPUs",
      "links: NVLink 4 900 GB/s a GPU with NVSwitch 3 (NVLS inside the node), 8 x 400 Gb/s NDR "
      "InfiniBand a node (systems/*.json), a double binary tree across nodes (NCCL without "
      "SHARP: an assumption; with the switches' sum the times move by 0.4 and 1.3 %), 1 us a "
      "message inside, 4 us across (assumed)",
      "Horovod's 64 MiB fusion buffer (its default: the logs do not say), fp16 gradients; 8 "
      "evaluations of 50,000 images at forward-only cost (the runs make 9: at 3, 7, ..., 35)"};
  r.published = {{"time_to_train_s", timeS, "median time to train", false, std::move(rests)}};
  return r;
}

PublishedRecord mlperfEos1Node() {
  return mlperfH100(
      "mlperf40_eos_1node", "NVIDIA Eos, 1 x DGX H100 (NVIDIA/results/eos_ngc24.04_mxnet)", 8,
      400, 798.097, "run_start to run_stop 798.097 s (median of 5, all successful)",
      "the device's rate at 400, which is one of the curve's two points (so this checks the "
      "evaluations, the exchange and the straggler term only)");
}

PublishedRecord mlperfHpe2Nodes() {
  return mlperfH100(
      "mlperf40_hpe_2nodes",
      "HPE Cray XD670, 2 nodes (HPE/results/HPE-Cray-XD670-Gen11-H100-SXM5-80GB_n2_mxnet_24.04)",
      16, 200, 476.042, "476.042 s (median of 5, all successful)",
      "the device curve between its points: the rate at 200 is interpolated, not measured (the "
      "check of the fixed cost per step)");
}

PublishedRecord mlperfEos8Nodes() {
  return mlperfH100(
      "mlperf40_eos_8nodes", "NVIDIA Eos, 8 x DGX H100 (NVIDIA/results/eos_n8_ngc24.04_mxnet)",
      64, 50, 150.321, "150.321 s (median of the 4 successful runs of 5)",
      "the device's rate at 50, which is the curve's other point, measured on these 64 GPUs");
}

}  // namespace

std::vector<PublishedRecord> publishedRecords() {
  return {goyal2017(),         akiba2017(),      jia2018(),        mikami2018(),
          yamazaki2019(),      horovodVgg16(),   horovodResnet101(), mlperfEos1Node(),
          mlperfHpe2Nodes(),   mlperfEos8Nodes()};
}

PublishedRecord withFreeLinks(PublishedRecord record) {
  for (LinkLevel* link : {&record.cluster.intra, &record.cluster.inter}) {
    link->gbps = 1e12;
    link->latencyUs = 0;
  }
  record.cluster.switchLatencyUs = 0;
  return record;
}

RecordPrediction predictRecord(const PublishedRecord& r,
                               const std::vector<double>& gradientElements) {
  RecordPrediction out;
  StepInputs& in = out.step;
  in.deviceImgS = r.deviceImgS;
  in.batchPerDevice = r.batchPerDevice;
  for (double e : gradientElements) in.tensorBytes.push_back(e * (r.fp16Exchange ? 2 : 4));
  in.fusionBytes = r.fusionBytes;
  in.allreduce = r.allreduce;
  out.run = predictRun(in, r.cluster, r.run);
  out.scalingEfficiency = out.run.step.scalingEfficiency;
  if (r.scalingBaseline > 1) {
    Cluster base = r.cluster;
    base.devices = r.scalingBaseline;
    base.devicesPerNode = std::min(base.devicesPerNode, r.scalingBaseline);
    out.scalingEfficiency /= predictStep(in, base).scalingEfficiency;
  }
  for (const auto& figure : r.published) {
    double predicted = 0;
    if (figure.name == "img_s") predicted = out.run.step.imgS;
    if (figure.name == "time_to_train_s") predicted = out.run.timeToTrainS;
    if (figure.name == "scaling_efficiency") predicted = out.scalingEfficiency;
    out.checks.push_back({figure.name, figure.value, predicted});
  }
  return out;
}

}  // namespace bigbatch::plan
