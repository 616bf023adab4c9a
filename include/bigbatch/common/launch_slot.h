// Which slot of its host a rank runs in: the unit a launcher hands out on a
// host that can be bad on its own (one GPU: device = slot mod the host's
// GPUs). Normally the rank's local rank; after the supervisor has dropped a
// lost worker's slot (BIGBATCH_SLOTS, common/supervision_env.h) the ranks
// of the next attempt take the slots that are left, so a bad GPU or a dead
// host is not used again.
//
// The plan names each host as the launcher does ("10.0.0.7=0,2|node8=1":
// host 10.0.0.7 keeps slots 0 and 2, node8 slot 1; one unnamed host, "=0,2",
// is the one local host), and a rank finds its host by its own name or
// addresses (host_identity.h) and takes the entry of its local rank there.
// So the plan holds whatever order the launcher maps ranks in (by slot, by
// node, --rank-by): only how many ranks each host gets must be the plan's.
//
// Pure functions of the environment; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bigbatch/common/host_identity.h"

namespace bigbatch {

struct HostSlots {
  std::string host;        // as the launcher names it; "" for the one local host
  std::vector<int> slots;  // the slots its ranks take, by local rank
};

// "a=0,2|b=1" -> {{a, {0, 2}}, {b, {1}}}. Throws InvalidArgument naming
// the text for a malformed one.
std::vector<HostSlots> parseSlotPlan(const std::string& text);
// The inverse of parseSlotPlan.
std::string formatSlotPlan(const std::vector<HostSlots>& plan);

// The slot of the rank of local rank `localRank` on `host` under `plan`;
// nullopt when no entry names the host (an unnamed entry names the host
// when it is the plan's only one) or it holds fewer slots than
// `localRank` + 1 — the plan does not describe this launch.
std::optional<int> slotInPlan(const std::vector<HostSlots>& plan, const HostIdentity& host,
                              int localRank);

// This process's slot: from BIGBATCH_SLOTS when it is set and describes
// this launch, else `localRank`.
int launchSlot(int localRank);

}  // namespace bigbatch
