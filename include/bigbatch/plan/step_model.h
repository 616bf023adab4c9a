// An analytical model of one synchronous data-parallel training step, and of
// a whole run: what `bigbatch plan` prints.
//
// One device's step takes compute = B / deviceImgS (forward, backward and the
// optimizer step at the per-device batch B, as measured on one device). On N
// devices:
//
//   step = forward + max(backward, end of the last bucket's exchange) + rest
//          + sync
//
// * forward = compute·(1 - backwardShare - optimizerShare), backward =
//   compute·backwardShare (2/3 by default: backward costs about twice the
//   forward's FLOPs), rest = compute·optimizerShare (the optimizer step, which
//   needs the reduced gradient and cannot overlap the exchange).
// * Buckets: gradient tensors in the order backward produces them, packed
//   greedily into buckets of at most fusionBytes (as ddp/bucket_layout.h).
//   Bucket k is ready when backward has produced the bytes up to its end —
//   readiness proportional to bytes, a conservative assumption for CNNs,
//   whose last layers hold most of the bytes and finish their backward first.
//   One exchange channel reduces the buckets in order, each starting when it
//   is ready and the previous one is done (with overlap off, all start after
//   backward). exposed = what runs past the end of backward.
// * sync: synchronous SGD waits for the slowest device. With a device's
//   compute time varying with coefficient of variation `jitter`, the expected
//   maximum of N is about compute·jitter·sqrt(2·ln N) above the mean (the
//   Gaussian extreme-value bound; the straggler effect of Chen et al. 2016,
//   "Revisiting Distributed Synchronous SGD"). Zero on one device.
//
// img/s = N·B / step; scaling efficiency = img/s ÷ (N · deviceImgS), i.e.
// against one device with no exchange and no wait.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "bigbatch/plan/cluster.h"

namespace bigbatch::plan {

struct StepInputs {
  double deviceImgS = 0;   // one device's training rate at batchPerDevice
  int batchPerDevice = 0;  // B
  // Gradient tensors in the order backward produces them, in bytes on the
  // wire (elements × 4 for fp32, × 2 for fp16).
  std::vector<double> tensorBytes;
  double fusionBytes = 25.0 * 1024 * 1024;  // bucket cap (ddp.fusion_bytes)
  std::string allreduce = "auto";           // a plannedAlgorithms() name or "auto"
  double backwardShare = 2.0 / 3.0;
  double optimizerShare = 0.0;
  double jitter = 0.02;  // coefficient of variation of one device's compute time
  bool overlap = true;   // buckets reduced while backward runs
};

struct StepPrediction {
  double computeS = 0;          // one device's step, B / deviceImgS
  double exchangeS = 0;         // all buckets' allreduce time, back to back
  double exposedExchangeS = 0;  // the part of it after backward ended
  double syncS = 0;             // expected wait for the slowest device
  double stepS = 0;
  double imgS = 0;  // all devices together
  double scalingEfficiency = 0;
  int buckets = 0;
  std::string algorithm;  // the largest bucket's algorithm ("auto" resolved)
};

// Packs `tensorBytes` (backward order) into buckets of at most `fusionBytes`,
// a tensor larger than that alone in its own, each starting 64 bytes
// aligned, as ddp/bucket_layout.h does for the DDP (kParameterAlignElements).
std::vector<double> packBuckets(const std::vector<double>& tensorBytes, double fusionBytes);

// A gradient of `totalBytes` with no tensor structure (`plan --grad-mb`):
// tensors of 1 MiB (the last one smaller), so buckets come out at the fusion
// size to within 1 MiB.
std::vector<double> uniformTensors(double totalBytes);

// Throws InvalidArgument for a non-positive rate, batch, fusion size or
// gradient, shares outside [0, 1) or summing to >= 1, a negative jitter.
StepPrediction predictStep(const StepInputs& in, const Cluster& cluster);

// A whole run: `epochs` passes over `datasetSize` examples at the predicted
// rate, plus evaluations: every `evalEveryEpochs` (0: none) a pass over
// `evalSize` examples, each costing forward only (1 - backwardShare -
// optimizerShare of a training example) spread over all devices.
struct RunInputs {
  double epochs = 90;
  double datasetSize = 1281167;  // ImageNet-1k train
  double evalSize = 50000;       // ImageNet-1k validation
  double evalEveryEpochs = 1;
};

struct RunPrediction {
  StepPrediction step;
  double stepsPerEpoch = 0;
  double trainS = 0;  // epochs × datasetSize ÷ img/s
  double evalS = 0;
  double timeToTrainS = 0;
};

RunPrediction predictRun(const StepInputs& in, const Cluster& cluster, const RunInputs& run);

// The inter-node bandwidth (Gb/s per node) at which the step's exchange
// (all buckets, back to back) takes `ratio` times its compute — the link
// that makes this machine's step reproduce a cluster's exchange/compute
// ratio (predict the cluster, read its exchange_s / compute_s, then ask for
// the link here). Found by bisection (the exchange shrinks as the link
// grows). Throws InvalidArgument on one node, or when `ratio` is out of
// reach (the latencies alone exceed it; the message says the least ratio
// possible).
double interGbpsForRatio(const StepInputs& in, Cluster cluster, double ratio);

// The (algorithm, fusion size) with the shortest predicted step, tried over
// plannedAlgorithms() and fusion sizes of 1 MiB to 256 MiB in powers of two.
struct Recommendation {
  std::string algorithm;
  double fusionBytes = 0;
  StepPrediction step;
};
Recommendation recommend(StepInputs in, const Cluster& cluster);

}  // namespace bigbatch::plan
