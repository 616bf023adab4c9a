// Where each rank of a job runs, as the ranks themselves see it: written
// by rank 0 once every rank has started (BIGBATCH_PLACEMENT_FILE,
// supervision_env.h), read by the supervisor after a failure to leave the
// failed rank's place out. The launcher's options do not say it: mpirun's
// --map-by node, --rank-by or -npernode, and srun's distributions, put
// rank r elsewhere than its slot order would.
//
// The file: a JSON array, one object per rank in rank order: {"rank",
// "host", "addresses", "local_rank", "slot"}.
//
// Pure functions and file I/O; thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "bigbatch/common/host_identity.h"

namespace bigbatch {

struct RankPlace {
  int rank = 0;
  HostIdentity host;
  int localRank = 0;  // among the ranks of its host, as the launcher counts them
  int slot = 0;       // its slot there (launch_slot.h)
};

std::string rankPlaceJson(const RankPlace& place);
RankPlace parseRankPlace(const std::string& json);

// Written atomically (temporary file, rename).
void writeRankPlacement(const std::string& path, const std::vector<RankPlace>& places);
// Empty when the file is missing or unreadable (the attempt failed before
// every rank started): the supervisor then falls back on the launcher's
// mapping.
std::vector<RankPlace> readRankPlacement(const std::string& path);

}  // namespace bigbatch
