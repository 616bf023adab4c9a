// The machine a plan is made for: how many devices, how many per node, and
// the two link levels between them under Hockney's α-β model (a message of
// m bytes costs α + β·m; Hockney 1994, "The communication challenge for
// MPP"). Plain values; thread-safe.
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

  int nodes() const { return devices / devicesPerNode; }
};

// Throws InvalidArgument naming the problem and the fix: devices < 1,
// devices not a multiple of devicesPerNode, a bandwidth that is not positive,
// a negative latency.
void validate(const Cluster& cluster);

}  // namespace bigbatch::plan
