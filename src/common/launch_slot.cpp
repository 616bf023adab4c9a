#include "bigbatch/common/launch_slot.h"

#include <cstdlib>
#include <sstream>

#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"
#include "bigbatch/common/supervision_env.h"

namespace bigbatch {

std::vector<HostSlots> parseSlotPlan(const std::string& text) {
  std::vector<HostSlots> plan;
  std::istringstream hosts(text);
  for (std::string entry; std::getline(hosts, entry, '|');) {
    const size_t eq = entry.rfind('=');
    BIGBATCH_REQUIRE(eq != std::string::npos, InvalidArgument,
                     "{}='{}': '{}' is not HOST=SLOTS; it is set by bigbatch's supervisor "
                     "(HOST=comma-separated slots, hosts separated by '|') — unset it",
                     kSlotsEnv, text, entry);
    HostSlots h{entry.substr(0, eq), {}};
    std::istringstream items(entry.substr(eq + 1));
    for (std::string item; std::getline(items, item, ',');) {
      char* end = nullptr;
      const long slot = std::strtol(item.c_str(), &end, 10);
      BIGBATCH_REQUIRE(!item.empty() && *end == '\0' && slot >= 0 && slot < (1 << 20),
                       InvalidArgument,
                       "{}='{}': '{}' is not a slot number; it is set by bigbatch's supervisor "
                       "(HOST=comma-separated slots, hosts separated by '|') — unset it",
                       kSlotsEnv, text, item);
      h.slots.push_back(static_cast<int>(slot));
    }
    plan.push_back(std::move(h));
  }
  return plan;
}

std::string formatSlotPlan(const std::vector<HostSlots>& plan) {
  std::string out;
  for (size_t h = 0; h < plan.size(); ++h) {
    if (h > 0) out += '|';
    out += plan[h].host + '=';
    for (size_t i = 0; i < plan[h].slots.size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(plan[h].slots[i]);
    }
  }
  return out;
}

std::optional<int> slotInPlan(const std::vector<HostSlots>& plan, const HostIdentity& host,
                              int localRank) {
  for (const HostSlots& h : plan) {
    const bool mine = h.host.empty() ? plan.size() == 1 : namesHost(h.host, host);
    if (!mine) continue;
    if (localRank < 0 || static_cast<size_t>(localRank) >= h.slots.size()) return std::nullopt;
    return h.slots[static_cast<size_t>(localRank)];
  }
  return std::nullopt;
}

int launchSlot(int localRank) {
  const char* text = std::getenv(kSlotsEnv);
  if (text == nullptr || *text == '\0') return localRank;
  const HostIdentity me = thisHost();
  const std::optional<int> slot = slotInPlan(parseSlotPlan(text), me, localRank);
  if (!slot) {
    // The slot left out after a lost worker may be this one: say so.
    log().warn("{}='{}' names no host that is this one ({}) with a local rank {}: taking slot {} "
               "(the supervisor's plan does not describe this launch; a slot it left out may "
               "be used again)",
               kSlotsEnv, text, me.name, localRank, localRank);
  }
  return slot.value_or(localRank);
}

}  // namespace bigbatch
