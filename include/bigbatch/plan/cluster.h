// The machine a plan is made for: how many devices, how many per node (one
// NVLink domain, or one host), the two link levels between them under
// Hockney's α-β model (a message of m bytes costs α + β·m; Hockney 1994,
// "The communication challenge for MPP"), and how each level can reduce:
//
//   intra  ring        point to point over the node's links (the default)
//          nvls        the node's NVLink switch sums (NVLink SHARP, H100's
//                      NVSwitch 3): a device sends its data once and reads
//                      its reduced part once
//   inter  ring        a ring of nodes (the default)
//          tree        NCCL's double binary tree: the ring's bandwidth,
//                      2·ceil(log2 nodes) messages of latency instead of
//                      2·(nodes - 1)
//          in_network  the fabric's switches sum (InfiniBand SHARP, NCCL's
//                      CollNet): a node sends its data up once and reads the
//                      sum once; latency two messages plus the switch
//                      levels climbed and descended
//
// (the `two_level` allreduce, allreduce_cost.h, uses them; bigbatch's own
// algorithms are point to point). clusterPreset() gives named machines of
// the published runs. Plain values; thread-safe.
#pragma once

#include <string>

namespace bigbatch::plan {

// One level of the network. For the intra-node level the bandwidth is that of
// one device's link to its peers (NVLink, PCIe, or a core's share of memory
// bandwidth on a CPU host), and concurrent intra-node messages of different
// devices do not share it. For the inter-node level it is the node's total
// injection bandwidth (e.g. 2 × 100 Gb/s EDR on ABCI), shared by every
// device of the node that sends off-node at the same time.
struct LinkLevel {
  double gbps = 0;       // bandwidth in Gb/s (1e9 bit/s)
  double latencyUs = 0;  // α: fixed cost of one message, µs

  double alphaS() const { return latencyUs * 1e-6; }
  double betaSPerByte() const { return 8.0 / (gbps * 1e9); }
};

struct Cluster {
  int devices = 1;
  int devicesPerNode = 1;
  LinkLevel intra{200, 5};  // NVLink-class defaults
  LinkLevel inter{100, 5};  // 100 Gb/s Ethernet/InfiniBand-class defaults
  std::string intraReduction = "ring";  // ring | nvls
  std::string interReduction = "ring";  // ring | tree | in_network
  int switchLevels = 3;                 // fabric levels an in-network sum climbs
  double switchLatencyUs = 0.3;         // each level, each way

  int nodes() const { return devices / devicesPerNode; }
};

// Throws InvalidArgument naming the problem and the fix: devices < 1,
// devices not a multiple of devicesPerNode, a bandwidth that is not positive,
// a negative latency, an unknown reduction.
void validate(const Cluster& cluster);

// A named machine, with `devices` devices: "NAME[,intra=R][,inter=R]", R a
// reduction of that level (above). The names, each with its source:
//   dgx-h100   8 H100 per node, NVLink 4 (900 GB/s = 7,200 Gb/s a device,
//              NVSwitch 3: nvls), 8 x 400 Gb/s NDR InfiniBand a node (3,200
//              Gb/s; in_network: Quantum-2 SHARP) — MLPerf Training v4.0's
//              "8x ConnectX-7 IB NDR 400Gb/s" and "NVLINK Gen4 900 GB/s +
//              NVSWITCH Gen3" (NVIDIA Eos); 1 µs a message inside, 4 µs
//              across, 0.3 µs a switch level (assumed)
//   dgx-a100   8 A100, NVLink 3 (600 GB/s), 8 x 200 Gb/s HDR, tree
//   abci-v100  4 V100, NVLink 2 (400 Gb/s between a pair), 2 x 100 Gb/s
//              EDR, ring both levels (the Fujitsu and Sony records)
// Throws InvalidArgument naming the known ones.
Cluster clusterPreset(const std::string& spec, int devices);

}  // namespace bigbatch::plan
