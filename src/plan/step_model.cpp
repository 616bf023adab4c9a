#include "bigbatch/plan/step_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "bigbatch/common/error.h"
#include "bigbatch/plan/allreduce_cost.h"

namespace bigbatch::plan {
namespace {

void validate(const StepInputs& in) {
  BIGBATCH_REQUIRE(in.deviceImgS > 0, InvalidArgument,
                   "--device-img-s {}: one device's training rate must be positive (images/s "
                   "at --batch-per-device)",
                   in.deviceImgS);
  BIGBATCH_REQUIRE(in.batchPerDevice >= 1, InvalidArgument,
                   "--batch-per-device {}: need at least 1 example per device", in.batchPerDevice);
  BIGBATCH_REQUIRE(in.fusionBytes > 0, InvalidArgument,
                   "--fusion-mb: the bucket size must be positive");
  double total = 0;
  for (double b : in.tensorBytes) total += b;
  BIGBATCH_REQUIRE(total > 0, InvalidArgument,
                   "the gradient is empty: give --model NAME or --grad-mb MB > 0");
  BIGBATCH_REQUIRE(
      in.backwardShare >= 0 && in.optimizerShare >= 0 && in.backwardShare + in.optimizerShare < 1,
      InvalidArgument,
      "--backward-share {} and --optimizer-share {}: each must be >= 0 and together "
      "< 1 (the forward takes the rest)",
      in.backwardShare, in.optimizerShare);
  BIGBATCH_REQUIRE(in.jitter >= 0, InvalidArgument, "--jitter {}: must be >= 0", in.jitter);
}

}  // namespace

std::vector<double> packBuckets(const std::vector<double>& tensorBytes, double fusionBytes) {
  constexpr double kAlignBytes = 64;  // the DDP's kParameterAlignElements fp32 values
  std::vector<double> buckets;
  double open = 0;
  for (double b : tensorBytes) {
    double start = std::ceil(open / kAlignBytes) * kAlignBytes;
    if (open > 0 && start + b > fusionBytes) {
      buckets.push_back(open);
      start = 0;
    }
    open = start + b;
  }
  if (open > 0) buckets.push_back(open);
  return buckets;
}

std::vector<double> uniformTensors(double totalBytes) {
  const double mib = 1024.0 * 1024.0;
  std::vector<double> tensors;
  for (double left = totalBytes; left > 0; left -= mib) tensors.push_back(std::min(mib, left));
  return tensors;
}

StepPrediction predictStep(const StepInputs& in, const Cluster& cluster) {
  validate(in);
  validate(cluster);
  StepPrediction out;
  out.computeS = in.batchPerDevice / in.deviceImgS;
  const double backwardS = out.computeS * in.backwardShare;
  const double optimizerS = out.computeS * in.optimizerShare;
  const double forwardS = out.computeS - backwardS - optimizerS;

  const std::vector<double> buckets = packBuckets(in.tensorBytes, in.fusionBytes);
  double total = 0;
  for (double b : buckets) total += b;
  out.buckets = static_cast<int>(buckets.size());

  // One exchange channel, buckets in backward order (times from the start
  // of backward).
  double produced = 0, channelFree = 0, largest = -1;
  for (double b : buckets) {
    produced += b;
    const double ready = in.overlap ? backwardS * produced / total : backwardS;
    // "auto" prices every algorithm once and keeps the cheapest.
    const auto [algorithm, counts] =
        in.allreduce == "auto"
            ? cheapestAllreduce(b, cluster)
            : std::make_pair(in.allreduce, allreduceCost(in.allreduce, b, cluster));
    const double cost = counts.seconds(cluster);
    if (b > largest && cluster.devices > 1) {
      largest = b;
      out.algorithm = algorithm;
    }
    channelFree = std::max(channelFree, ready) + cost;
    out.exchangeS += cost;
  }
  out.exposedExchangeS = std::max(0.0, channelFree - backwardS);
  const int n = cluster.devices;
  out.syncS = n > 1 ? out.computeS * in.jitter * std::sqrt(2.0 * std::log(double(n))) : 0.0;
  out.stepS = forwardS + backwardS + out.exposedExchangeS + optimizerS + out.syncS;
  out.imgS = n * in.batchPerDevice / out.stepS;
  out.scalingEfficiency = out.computeS / out.stepS;
  return out;
}

RunPrediction predictRun(const StepInputs& in, const Cluster& cluster, const RunInputs& run) {
  BIGBATCH_REQUIRE(run.epochs > 0 && run.datasetSize > 0, InvalidArgument,
                   "--epochs {} and --dataset-size {} must be positive", run.epochs,
                   run.datasetSize);
  BIGBATCH_REQUIRE(run.evalEveryEpochs >= 0 && run.evalSize >= 0, InvalidArgument,
                   "--eval-every {} and --eval-size {} must be >= 0", run.evalEveryEpochs,
                   run.evalSize);
  RunPrediction out;
  out.step = predictStep(in, cluster);
  const double globalBatch = double(cluster.devices) * in.batchPerDevice;
  out.stepsPerEpoch = std::ceil(run.datasetSize / globalBatch);
  out.trainS = run.epochs * run.datasetSize / out.step.imgS;
  if (run.evalEveryEpochs > 0 && run.evalSize > 0) {
    const double evaluations = std::floor(run.epochs / run.evalEveryEpochs);
    const double forwardShare = 1.0 - in.backwardShare - in.optimizerShare;
    const double evalImgS = cluster.devices * in.deviceImgS / forwardShare;
    out.evalS = evaluations * run.evalSize / evalImgS;
  }
  out.timeToTrainS = out.trainS + out.evalS;
  return out;
}

double interGbpsForRatio(const StepInputs& in, Cluster c, double ratio) {
  BIGBATCH_REQUIRE(c.nodes() > 1, InvalidArgument,
                   "--link-for-ratio: {} device(s) on {} node(s) exchange nothing between nodes; "
                   "use at least 2 nodes (--devices a multiple of --devices-per-node, e.g. 2 x 1)",
                   c.devices, c.nodes());
  BIGBATCH_REQUIRE(ratio > 0, InvalidArgument, "--link-for-ratio {}: must be > 0", ratio);
  auto ratioAt = [&](double gbps) {
    c.inter.gbps = gbps;
    const StepPrediction p = predictStep(in, c);
    return p.exchangeS / p.computeS;
  };
  double lo = 1e-6, hi = 1e7;  // Gb/s: the ratio falls from ratioAt(lo) to ratioAt(hi)
  const double least = ratioAt(hi);
  BIGBATCH_REQUIRE(ratio > least, InvalidArgument,
                   "--link-for-ratio {}: out of reach; with these latencies the exchange takes at "
                   "least {:.4g} of the compute on any link",
                   ratio, least);
  for (int i = 0; i < 200 && hi / lo > 1 + 1e-9; ++i) {
    const double mid = std::sqrt(lo * hi);
    (ratioAt(mid) > ratio ? lo : hi) = mid;
  }
  return std::sqrt(lo * hi);
}

Recommendation recommend(StepInputs in, const Cluster& cluster) {
  Recommendation best;
  for (const auto& algorithm : plannedAlgorithms()) {
    for (double mb = 1; mb <= 256; mb *= 2) {
      in.allreduce = algorithm;
      in.fusionBytes = mb * 1024 * 1024;
      const StepPrediction p = predictStep(in, cluster);
      if (best.algorithm.empty() || p.stepS < best.step.stepS)
        best = {algorithm, in.fusionBytes, p};
    }
  }
  return best;
}

}  // namespace bigbatch::plan
