// Which slot of its host a rank runs in: the unit a launcher hands out on a
// host that can be bad on its own (one GPU: device = slot mod the host's
// GPUs). Normally the rank's local rank; after
// the supervisor has dropped a lost worker's slot (BIGBATCH_SLOTS,
// common/supervision_env.h) the ranks of the next attempt take the slots
// that are left, so a bad GPU or a dead host is not used again.
//
// Pure functions of the environment; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace bigbatch {

// The slots each host keeps, hosts in the launcher's order ("0,2|1" ->
// {{0, 2}, {1}}). Throws InvalidArgument naming the text for a malformed
// one.
std::vector<std::vector<int>> parseSlotPlan(const std::string& text);
// The inverse of parseSlotPlan.
std::string formatSlotPlan(const std::vector<std::vector<int>>& plan);

// The slot of world rank `rank` under `plan`, where the launcher filled the
// hosts in order (mpirun's mapping by slot, with each host given exactly as
// many slots as the plan lists): rank r is the (r - first rank of its
// host)-th entry of its host's list. nullopt when the plan holds fewer
// ranks than `rank` + 1, or when `localRank` (the launcher's count on the
// host) disagrees with the plan's — the plan does not describe this launch.
std::optional<int> slotInPlan(const std::vector<std::vector<int>>& plan, int rank, int localRank);

// This process's slot: from BIGBATCH_SLOTS when it is set and describes
// this launch, else `localRank`.
int launchSlot(int rank, int localRank);

}  // namespace bigbatch
