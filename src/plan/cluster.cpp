#include "bigbatch/plan/cluster.h"

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
}

}  // namespace bigbatch::plan
