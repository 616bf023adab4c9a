// The allreduce cost formulas, counted by hand for small clusters.
#include "bigbatch/plan/allreduce_cost.h"

#include <gtest/gtest.h>

#include <limits>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/common/error.h"

namespace bigbatch::plan {
namespace {

constexpr double S = 8e6;  // bytes

Cluster cluster(int devices, int perNode) {
  Cluster c;
  c.devices = devices;
  c.devicesPerNode = perNode;
  c.intra = {800, 2};  // fast inside
  c.inter = {100, 5};
  return c;
}

void expectCounts(const CommCost& c, double im, double ib, double em, double eb) {
  EXPECT_DOUBLE_EQ(c.intraMessages, im);
  EXPECT_DOUBLE_EQ(c.intraBytes, ib);
  EXPECT_DOUBLE_EQ(c.interMessages, em);
  EXPECT_DOUBLE_EQ(c.interBytes, eb);
}

TEST(AllreduceCost, RingOnOneNode) {
  // 2(n-1) = 6 steps of S/4.
  expectCounts(allreduceCost("ring", S, cluster(4, 4)), 6, 6 * S / 4, 0, 0);
}

TEST(AllreduceCost, RingAcrossNodesIsBoundByTheNodeLink) {
  // 8 devices on 2 nodes: 14 steps, each with an S/8 chunk over the links.
  expectCounts(allreduceCost("ring", S, cluster(8, 4)), 0, 0, 14, 14 * S / 8);
}

// A ring of nodes (one device per node: torus2d's and hierarchical's phase
// across nodes) runs on nothing but the node links, so a faster network
// always pays there, also when it is faster than the intra-node link; and
// no algorithm gets slower when the network gets faster.
TEST(AllreduceCost, MoreInterNodeBandwidthIsNeverSlowerAndPaysForARingOfNodes) {
  Cluster c;
  c.devices = 8192;
  c.devicesPerNode = 8;
  c.intra = {96, 2};
  const double bytes = 100e6;
  std::vector<double> torus;
  for (double gbps : {95.0, 112.0, 200.0}) {
    c.inter = {gbps, 5};
    torus.push_back(allreduceCost("torus2d", bytes, c).seconds(c));
  }
  EXPECT_GT(torus[0], torus[1]);
  EXPECT_GT(torus[1], torus[2]) << "torus2d's ring across nodes was charged to the intra link";
  // Its vertical ring: 2(h-1) messages of S/(G·h)... all of it through the link.
  c.inter = {200, 5};
  Cluster across = c;
  across.devices = c.nodes();
  across.devicesPerNode = 1;
  const CommCost ring = allreduceCost("ring", bytes, across);
  EXPECT_DOUBLE_EQ(ring.intraMessages, 0);
  EXPECT_DOUBLE_EQ(ring.interMessages, 2.0 * (across.devices - 1));

  for (const std::string a : {"ring", "halving_doubling", "recursive_doubling", "hierarchical", "torus2d"}) {
    for (int perNode : {1, 4, 8}) {
      c.devicesPerNode = perNode;
      c.devices = 64 * perNode;
      double before = std::numeric_limits<double>::infinity();
      for (double gbps : {10.0, 50.0, 95.0, 112.0, 200.0, 800.0}) {
        c.inter = {gbps, 5};
        const double s = allreduceCost(a, bytes, c).seconds(c);
        EXPECT_LE(s, before * (1 + 1e-12)) << a << ", " << perNode << " per node, " << gbps << " Gb/s";
        before = s;
      }
    }
  }
}

TEST(AllreduceCost, HalvingDoublingSharesTheLinkOffNode) {
  // 8 devices, 4 per node: distance 4 leaves the node (4 devices × S/2 each
  // through the link), distances 2 and 1 stay inside; each round twice.
  expectCounts(allreduceCost("halving_doubling", S, cluster(8, 4)), 4, 2 * (S / 4 + S / 8), 2,
               2 * 4 * (S / 2));
}

TEST(AllreduceCost, RecursiveDoublingFoldsANonPowerOfTwo) {
  // 6 devices on one node: fold (2 messages of S) + rounds at distance 1, 2.
  expectCounts(allreduceCost("recursive_doubling", S, cluster(6, 6)), 4, 4 * S, 0, 0);
}

TEST(AllreduceCost, HierarchicalRingAcrossForLargeBlocks) {
  // 8 devices, 4 per node: intra reduce-scatter (3 messages of S/4), inter
  // ring between 2 nodes on blocks of S/4 = 2 MB >= 256 KiB × 2 (2 steps, S/2
  // each through the link), allgather inside (3 messages of S/4).
  expectCounts(allreduceCost("hierarchical", S, cluster(8, 4)), 3 + 3, 3 * S / 4 + 3 * S / 4, 2,
               2 * S / 2);
}

TEST(AllreduceCost, HierarchicalOnOneNodeIsItsAllreduce) {
  expectCounts(allreduceCost("hierarchical", S, cluster(4, 4)), 6, 6 * S / 4, 0, 0);
}

TEST(AllreduceCost, HierarchicalRecursiveDoublingAcrossForSmallBlocks) {
  // 16 nodes of 4: block S/4 = 64 KB < 256 KiB × 16: 4 rounds of S.
  const double small = 256e3;
  expectCounts(allreduceCost("hierarchical", small, cluster(64, 4)), 6, 6 * small / 4, 4,
               4 * small);
}

TEST(AllreduceCost, Torus2dReduceScattersInsideTheNode) {
  expectCounts(allreduceCost("torus2d", S, cluster(8, 4)), 6, 6 * S / 4, 2, 2 * S / 2);
}

TEST(AllreduceCost, SecondsAreLinearInAlphaAndBeta) {
  const Cluster c = cluster(8, 4);
  const CommCost cost = allreduceCost("hierarchical", S, c);
  const double expected = 6 * 2e-6 + (6 * S / 4) * 8 / 800e9 + 2 * 5e-6 + S * 8 / 100e9;
  EXPECT_NEAR(cost.seconds(c), expected, 1e-15);
}

TEST(AllreduceCost, AutoIsTheCheapest) {
  for (double bytes : {1e3, 1e5, 1e7, 1e9}) {
    const Cluster c = cluster(64, 8);
    const double autoS = allreduceCost("auto", bytes, c).seconds(c);
    for (const auto& name : plannedAlgorithms())
      EXPECT_LE(autoS, allreduceCost(name, bytes, c).seconds(c)) << name << " " << bytes;
  }
}

TEST(AllreduceCost, OneDeviceCostsNothing) {
  expectCounts(allreduceCost("ring", S, cluster(1, 1)), 0, 0, 0, 0);
}

TEST(AllreduceCost, UnknownAlgorithmIsNamed) {
  EXPECT_THROW(allreduceCost("tree", S, cluster(8, 4)), InvalidArgument);
}

TEST(AllreduceCost, SegmentIsTheCollectivesDefault) {
  // (the hierarchical algorithm's threshold where no segment is named)
  EXPECT_EQ(kRingSegmentBytes, static_cast<double>(Communicator::kDefaultSegmentBytes));
}

}  // namespace
}  // namespace bigbatch::plan

namespace bigbatch::plan {
namespace {

// NCCL's two levels with the cluster's reductions: at 16 images per H100 on
// 316 nodes the latency term decides — a ring of nodes costs 630 messages a
// bucket, a double binary tree 18, the switches 2 plus their levels.
TEST(AllreduceCost, TwoLevelPerReductionOfEachLevel) {
  const double s = 25.0 * 1024 * 1024;
  Cluster c = clusterPreset("dgx-h100,inter=ring", 2528);
  EXPECT_EQ(c.nodes(), 316);
  const CommCost ring = allreduceCost("two_level", s, c);
  EXPECT_EQ(ring.interMessages, 2 * 315);
  EXPECT_DOUBLE_EQ(ring.interBytes, 2.0 * 315 / 316 * s);
  EXPECT_EQ(ring.intraMessages, 2);  // nvls: one message each way
  EXPECT_DOUBLE_EQ(ring.intraBytes, 2 * s / 8);
  c.interReduction = "tree";
  const CommCost tree = allreduceCost("two_level", s, c);
  EXPECT_EQ(tree.interMessages, 2 * 9);  // ceil(log2 316) = 9
  EXPECT_DOUBLE_EQ(tree.interBytes, 2 * s);
  c.interReduction = "in_network";
  const CommCost sharp = allreduceCost("two_level", s, c);
  EXPECT_EQ(sharp.interMessages, 2);
  EXPECT_DOUBLE_EQ(sharp.interBytes, s);
  EXPECT_EQ(sharp.switchHops, 2 * c.switchLevels);
  EXPECT_LT(sharp.seconds(c), tree.seconds(c));
  EXPECT_LT(tree.seconds(c), ring.seconds(c) / 5);
  c.intraReduction = "ring";
  EXPECT_EQ(allreduceCost("two_level", s, c).intraMessages, 2 * 7);
}

TEST(AllreduceCost, ClusterPresetsAndBadOnesNamed) {
  const Cluster a = clusterPreset("dgx-a100", 64);
  EXPECT_EQ(a.devicesPerNode, 8);
  EXPECT_EQ(a.interReduction, "tree");
  EXPECT_EQ(clusterPreset("dgx-h100", 4).devicesPerNode, 4);  // one partial node
  EXPECT_EQ(clusterPreset("abci-v100,inter=tree", 8).interReduction, "tree");
  EXPECT_THROW(clusterPreset("dgx-z100", 8), InvalidArgument);
  EXPECT_THROW(clusterPreset("dgx-h100,inter=mesh", 8), InvalidArgument);
  EXPECT_THROW(clusterPreset("dgx-h100,sharp", 8), InvalidArgument);
  EXPECT_THROW(clusterPreset("dgx-h100", 12), InvalidArgument);  // not a multiple of 8
  EXPECT_THROW(allreduceCost("nccl", 1, Cluster{}), InvalidArgument);  // named even on 1 device
}

}  // namespace
}  // namespace bigbatch::plan
