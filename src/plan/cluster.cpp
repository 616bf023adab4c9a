#include "bigbatch/plan/cluster.h"

#include <sstream>
#include <string>
#include <vector>

#include "bigbatch/common/error.h"

namespace bigbatch::plan {

void validate(const Cluster& c) {
  BIGBATCH_REQUIRE(c.devices >= 1, InvalidArgument, "--devices {}: need at least 1 device",
                   c.devices);
  BIGBATCH_REQUIRE(c.devicesPerNode >= 1, InvalidArgument,
                   "--devices-per-node {}: need at least 1 device per node", c.devicesPerNode);
  BIGBATCH_REQUIRE(c.devices % c.devicesPerNode == 0, InvalidArgument,
                   "--devices {} is not a multiple of --devices-per-node {}: every node holds "
                   "the same number of devices; use e.g. --devices {}",
                   c.devices, c.devicesPerNode,
                   (c.devices / c.devicesPerNode + 1) * c.devicesPerNode);
  BIGBATCH_REQUIRE(c.intra.gbps > 0, InvalidArgument,
                   "--intra-gbps {}: a link's bandwidth must be positive", c.intra.gbps);
  BIGBATCH_REQUIRE(c.inter.gbps > 0, InvalidArgument,
                   "--inter-gbps {}: a link's bandwidth must be positive", c.inter.gbps);
  BIGBATCH_REQUIRE(c.intra.latencyUs >= 0, InvalidArgument,
                   "--intra-latency-us {}: a latency cannot be negative", c.intra.latencyUs);
  BIGBATCH_REQUIRE(c.inter.latencyUs >= 0, InvalidArgument,
                   "--inter-latency-us {}: a latency cannot be negative", c.inter.latencyUs);
  BIGBATCH_REQUIRE(c.intraReduction == "ring" || c.intraReduction == "nvls", InvalidArgument,
                   "intra={}: a node reduces by ring or nvls (its NVLink switch)",
                   c.intraReduction);
  BIGBATCH_REQUIRE(
      c.interReduction == "ring" || c.interReduction == "tree" || c.interReduction == "in_network",
      InvalidArgument,
      "inter={}: nodes reduce by ring, tree (NCCL's double binary tree) or "
      "in_network (the switches: SHARP)",
      c.interReduction);
  BIGBATCH_REQUIRE(c.switchLevels >= 1 && c.switchLatencyUs >= 0, InvalidArgument,
                   "{} switch level(s) of {} µs: need at least 1 level and a latency >= 0",
                   c.switchLevels, c.switchLatencyUs);
}

Cluster clusterPreset(const std::string& spec, int devices) {
  std::vector<std::string> parts;
  std::istringstream in(spec);
  for (std::string part; std::getline(in, part, ',');) parts.push_back(part);
  BIGBATCH_REQUIRE(!parts.empty() && !parts[0].empty(), InvalidArgument,
                   "--cluster is empty: give dgx-h100, dgx-a100 or abci-v100 (optionally "
                   ",intra=ring|nvls ,inter=ring|tree|in_network)");
  Cluster c;
  c.devices = devices;
  const std::string& name = parts[0];
  if (name == "dgx-h100") {
    c.devicesPerNode = 8;
    c.intra = {7200, 1};
    c.inter = {3200, 4};
    c.intraReduction = "nvls";
    c.interReduction = "in_network";
  } else if (name == "dgx-a100") {
    c.devicesPerNode = 8;
    c.intra = {4800, 1};
    c.inter = {1600, 4};
    c.interReduction = "tree";
  } else if (name == "abci-v100") {
    c.devicesPerNode = 4;
    c.intra = {400, 5};
    c.inter = {200, 5};
  } else {
    BIGBATCH_THROW(
        InvalidArgument,
        "--cluster '{}': the known machines are dgx-h100, dgx-a100 and abci-v100 "
        "(docs/SCALE.md); or describe one with --devices-per-node and --intra-*/--inter-*",
        name);
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p.rfind("intra=", 0) == 0) {
      c.intraReduction = p.substr(6);
    } else if (p.rfind("inter=", 0) == 0) {
      c.interReduction = p.substr(6);
    } else {
      BIGBATCH_THROW(InvalidArgument,
                     "--cluster '{}': '{}' is neither intra=R nor inter=R (e.g. "
                     "dgx-h100,inter=tree)",
                     spec, p);
    }
  }
  if (c.devices < c.devicesPerNode) c.devicesPerNode = c.devices;
  validate(c);
  return c;
}

}  // namespace bigbatch::plan
