// The cost of one allreduce of S bytes on a Cluster, for each algorithm of
// the collectives module (collectives/algorithms.h gives their steps and
// bytes; this file prices them). Ranks are numbered node by node, as mpirun
// places them. Notation: n devices, G per node, h = n/G nodes,
// p = the largest power of two <= n.
//
//   ring              2(n-1) steps of S/n. On one node every step is an
//                     intra-node message; across nodes each step also sends
//                     one S/n chunk over every node's link, and a step lasts
//                     as long as its slower level — with one device per node
//                     (a ring of nodes) every hop is the node link's.
//   halving_doubling  fold (2 messages of S, when n is not a power of two),
//                     then log2(p) halving rounds with messages S/2, S/4, ...
//                     to partners at distance p/2, p/4, ..., and the mirror
//                     doubling rounds. A round whose distance is >= G leaves
//                     the node: all G devices of a node send at once over its
//                     link, which carries G messages.
//   recursive_doubling  fold, then log2(p) rounds of S to partners at
//                     distance 1, 2, 4, ...; off-node rounds as above.
//   hierarchical      (1) reduce-scatter inside each node (G-1 messages of
//                     S/G; on one node a ring allreduce, 2(G-1) messages of
//                     S/G, and nothing else); (2) each local rank allreduces
//                     its block of S/G with its peers on the other h-1
//                     nodes — all G at once through the node's link: a ring
//                     (2(h-1) messages of S/(G·h) each, 2(h-1)/h·S bytes
//                     through the link) when the block is >=
//                     kRingSegmentBytes·h, else recursive doubling; (3)
//                     allgather inside the node (G-1 messages of S/G).
//   torus2d           not a bigbatch algorithm: the two-level scheme the
//                     published runs used (Mikami et al. 2018's 2D torus,
//                     NCCL-style hierarchical): reduce-scatter inside the node
//                     (G-1 messages of S/G), a ring of each S/G block across
//                     the nodes (all G at once: 2(h-1) messages, 2(h-1)/h·S
//                     bytes through the link), allgather inside the node.
//   two_level         not a bigbatch algorithm either: NCCL's two levels as
//                     the cluster can reduce (cluster.h): inside the node a
//                     reduce-scatter and at the end an allgather — by ring
//                     (G-1 messages of S/G each) or by the NVLink switch
//                     (nvls: one message of S/G each) — and across the nodes
//                     each S/G block summed with its peers, all G at once
//                     through the node's link (S bytes of it): by a ring of
//                     nodes (2(h-1) messages, 2(h-1)/h·S), a double binary
//                     tree (2·ceil(log2 h) messages, 2S: each node is inner
//                     in one tree and a leaf in the other, and sends and
//                     receives 2S in all, pipelined) or in the switches
//                     (in_network: 2 messages, S each way, and the switch
//                     levels up and down). At 16 images per GPU on 2,500
//                     GPUs the latency term decides: a ring of 316 nodes is
//                     630 messages a bucket, a tree 18, the switches 2.
//
// Not modelled: the sum's arithmetic (on GPUs hidden behind the transfers;
// on CPUs it is folded into the fitted β by `plan --calibrate`), contention
// between jobs, and the fat tree's oversubscription.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bigbatch/plan/cluster.h"

namespace bigbatch::plan {

// The ring pipelining segment of the collectives module where none is named
// (Communicator::kDefaultSegmentBytes): the hierarchical algorithm's
// cross-node phase uses the ring for blocks of at least this many bytes per
// node.
inline constexpr double kRingSegmentBytes = 256 * 1024;

// An exchange's cost as counts on its critical path: messages and bytes per
// link level. Linear in α and β, so measured times can be fitted to it.
struct CommCost {
  double intraMessages = 0, intraBytes = 0;
  double interMessages = 0, interBytes = 0;  // bytes through one node's link
  double switchHops = 0;  // switch levels an in-network sum crosses, up and down

  double seconds(const Cluster& cluster) const;
  CommCost& operator+=(const CommCost& other);
};

// bigbatch's algorithms priced here, in the order `auto` tries them
// (allreduceCost also prices "torus2d").
std::vector<std::string> plannedAlgorithms();

// Cost of one allreduce of `bytes` with `algorithm` (a plannedAlgorithms()
// name, "torus2d", "two_level", or "auto": the cheapest of
// plannedAlgorithms() for this size). Throws InvalidArgument for another
// name.
CommCost allreduceCost(const std::string& algorithm, double bytes, const Cluster& cluster);

// The cheapest algorithm for `bytes` on `cluster`, and its cost.
std::pair<std::string, CommCost> cheapestAllreduce(double bytes, const Cluster& cluster);

}  // namespace bigbatch::plan
