#include "bigbatch/plan/allreduce_cost.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "bigbatch/common/error.h"

namespace bigbatch::plan {
namespace {

int floorLog2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

// One message of `bytes` from every device to a partner `distance` ranks away,
// all devices at once: off-node when the partner is on another node, and then
// the node's G devices share its link.
CommCost exchangeRound(double bytes, int distance, const Cluster& c) {
  CommCost cost;
  if (c.nodes() > 1 && distance >= c.devicesPerNode) {
    cost.interMessages = 1;
    cost.interBytes = bytes * c.devicesPerNode;
  } else {
    cost.intraMessages = 1;
    cost.intraBytes = bytes;
  }
  return cost;
}

// Non-power-of-two worlds: ranks 2i and 2i+1 (i < n - p) fold: one message of
// S in, the result back at the end.
CommCost foldCost(double bytes, int n, const Cluster& c) {
  const int p = 1 << floorLog2(n);
  CommCost cost;
  if (n == p) return cost;
  cost += exchangeRound(bytes, 1, c);
  cost += exchangeRound(bytes, 1, c);
  return cost;
}

CommCost ringCost(double bytes, int n, const Cluster& c) {
  CommCost cost;
  if (n <= 1) return cost;
  const double steps = 2.0 * (n - 1), chunk = bytes / n;
  // Across nodes every step moves a chunk over each node's link while the
  // other hops stay inside nodes; the step takes the slower of the two. With
  // one device per node (a ring of nodes: hierarchical's and torus2d's
  // phase across them) every hop leaves its node: the link alone.
  const double intraStep = c.intra.alphaS() + chunk * c.intra.betaSPerByte();
  const double interStep = c.inter.alphaS() + chunk * c.inter.betaSPerByte();
  if (c.nodes() > 1 && (c.devicesPerNode == 1 || interStep >= intraStep)) {
    cost.interMessages = steps;
    cost.interBytes = steps * chunk;
  } else {
    cost.intraMessages = steps;
    cost.intraBytes = steps * chunk;
  }
  return cost;
}

CommCost halvingDoublingCost(double bytes, int n, const Cluster& c) {
  CommCost cost = foldCost(bytes, n, c);
  const int p = 1 << floorLog2(n);
  double block = bytes;
  for (int distance = p / 2; distance >= 1; distance /= 2) {
    block /= 2;
    const CommCost round = exchangeRound(block, distance, c);
    cost += round;  // halving
    cost += round;  // its mirror in the doubling
  }
  return cost;
}

CommCost recursiveDoublingCost(double bytes, int n, const Cluster& c) {
  CommCost cost = foldCost(bytes, n, c);
  const int p = 1 << floorLog2(n);
  for (int distance = 1; distance < p; distance *= 2) cost += exchangeRound(bytes, distance, c);
  return cost;
}

CommCost hierarchicalCost(double bytes, const Cluster& c) {
  const int g = c.devicesPerNode, h = c.nodes();
  Cluster node = c;  // one node alone
  node.devices = g;
  CommCost cost;
  if (g > 1 && h == 1) cost += ringCost(bytes, g, node);  // one node: its allreduce alone
  if (g > 1 && h > 1) {  // reduce-scatter of the G blocks inside the node
    cost.intraMessages += g - 1;
    cost.intraBytes += (g - 1) * bytes / g;
  }
  if (h > 1) {
    // All G local ranks reduce their block across the nodes at once; in the
    // node-level collective a node's link carries the G blocks, i.e. the
    // collective of one block of G·(S/G) = S bytes between h "ranks".
    Cluster across = c;
    across.devices = h;
    across.devicesPerNode = 1;
    const double block = bytes / g;
    CommCost inter = block >= kRingSegmentBytes * h ? ringCost(bytes, h, across)
                                                    : recursiveDoublingCost(bytes, h, across);
    cost += inter;
  }
  if (g > 1 && h > 1) {  // allgather of the G blocks inside the node
    cost.intraMessages += g - 1;
    cost.intraBytes += (g - 1) * bytes / g;
  }
  return cost;
}

// The two-level scheme of the published runs (Mikami et al. 2018's 2D torus;
// NCCL-style hierarchical): reduce-scatter inside the node, ring allreduce of
// each S/G block across the nodes (all G at once through the node's link),
// allgather inside the node.
CommCost torus2dCost(double bytes, const Cluster& c) {
  const int g = c.devicesPerNode, h = c.nodes();
  CommCost cost;
  if (g > 1) {  // reduce-scatter and, at the end, allgather
    cost.intraMessages = 2.0 * (g - 1);
    cost.intraBytes = 2.0 * (g - 1) * bytes / g;
  }
  if (h > 1) {
    Cluster across = c;
    across.devices = h;
    across.devicesPerNode = 1;
    cost += ringCost(bytes, h, across);
  }
  return cost;
}

int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// NCCL's two levels with the cluster's reductions (allreduce_cost.h).
CommCost twoLevelCost(double bytes, const Cluster& c) {
  const int g = c.devicesPerNode, h = c.nodes();
  CommCost cost;
  if (g > 1) {  // reduce-scatter and, at the end, allgather inside the node
    const bool nvls = c.intraReduction == "nvls";
    cost.intraMessages = nvls ? 2.0 : 2.0 * (g - 1);
    cost.intraBytes = nvls ? 2.0 * bytes / g : 2.0 * (g - 1) * bytes / g;
  }
  if (h > 1) {
    if (c.interReduction == "in_network") {
      cost.interMessages += 2;
      cost.interBytes += bytes;
      cost.switchHops += 2.0 * c.switchLevels;
    } else if (c.interReduction == "tree") {
      cost.interMessages += 2.0 * ceilLog2(h);
      cost.interBytes += 2.0 * bytes;
    } else {
      Cluster across = c;
      across.devices = h;
      across.devicesPerNode = 1;
      cost += ringCost(bytes, h, across);
    }
  }
  return cost;
}

}  // namespace

double CommCost::seconds(const Cluster& c) const {
  return intraMessages * c.intra.alphaS() + intraBytes * c.intra.betaSPerByte() +
         interMessages * c.inter.alphaS() + interBytes * c.inter.betaSPerByte() +
         switchHops * c.switchLatencyUs * 1e-6;
}

CommCost& CommCost::operator+=(const CommCost& o) {
  intraMessages += o.intraMessages;
  intraBytes += o.intraBytes;
  interMessages += o.interMessages;
  interBytes += o.interBytes;
  switchHops += o.switchHops;
  return *this;
}

std::vector<std::string> plannedAlgorithms() {
  return {"ring", "halving_doubling", "recursive_doubling", "hierarchical"};
}

CommCost allreduceCost(const std::string& algorithm, double bytes, const Cluster& c) {
  static const std::vector<std::string> known = {"ring",         "halving_doubling",
                                                 "recursive_doubling", "hierarchical",
                                                 "torus2d",      "two_level", "auto"};
  BIGBATCH_REQUIRE(std::find(known.begin(), known.end(), algorithm) != known.end(),
                   InvalidArgument,
                   "--allreduce '{}': choose ring, halving_doubling, recursive_doubling, "
                   "hierarchical, torus2d, two_level or auto",
                   algorithm);
  const int n = c.devices;
  if (n <= 1 || bytes <= 0) return {};
  if (algorithm == "ring") return ringCost(bytes, n, c);
  if (algorithm == "halving_doubling") return halvingDoublingCost(bytes, n, c);
  if (algorithm == "recursive_doubling") return recursiveDoublingCost(bytes, n, c);
  if (algorithm == "hierarchical") return hierarchicalCost(bytes, c);
  if (algorithm == "torus2d") return torus2dCost(bytes, c);
  if (algorithm == "two_level") return twoLevelCost(bytes, c);
  return cheapestAllreduce(bytes, c).second;
}

std::pair<std::string, CommCost> cheapestAllreduce(double bytes, const Cluster& c) {
  std::pair<std::string, CommCost> best{"", {}};
  double bestS = std::numeric_limits<double>::infinity();
  for (const auto& name : plannedAlgorithms()) {
    const CommCost cost = allreduceCost(name, bytes, c);
    const double s = cost.seconds(c);
    if (s < bestS) {
      bestS = s;
      best = {name, cost};
    }
  }
  return best;
}

}  // namespace bigbatch::plan
