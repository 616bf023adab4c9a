#include "bigbatch/common/launch_slot.h"

#include <cstdlib>
#include <sstream>

#include "bigbatch/common/error.h"
#include "bigbatch/common/supervision_env.h"

namespace bigbatch {

std::vector<std::vector<int>> parseSlotPlan(const std::string& text) {
  std::vector<std::vector<int>> plan;
  std::istringstream hosts(text);
  for (std::string host; std::getline(hosts, host, '|');) {
    std::vector<int> slots;
    std::istringstream items(host);
    for (std::string item; std::getline(items, item, ',');) {
      char* end = nullptr;
      const long slot = std::strtol(item.c_str(), &end, 10);
      BIGBATCH_REQUIRE(!item.empty() && *end == '\0' && slot >= 0 && slot < (1 << 20),
                       InvalidArgument,
                       "{}='{}': '{}' is not a slot number; it is set by bigbatch's supervisor "
                       "(comma-separated slots, hosts separated by '|') — unset it",
                       kSlotsEnv, text, item);
      slots.push_back(static_cast<int>(slot));
    }
    plan.push_back(std::move(slots));
  }
  return plan;
}

std::string formatSlotPlan(const std::vector<std::vector<int>>& plan) {
  std::string out;
  for (size_t h = 0; h < plan.size(); ++h) {
    if (h > 0) out += '|';
    for (size_t i = 0; i < plan[h].size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(plan[h][i]);
    }
  }
  return out;
}

std::optional<int> slotInPlan(const std::vector<std::vector<int>>& plan, int rank, int localRank) {
  int first = 0;
  for (const auto& slots : plan) {
    const int n = static_cast<int>(slots.size());
    if (rank < first + n) {
      if (rank - first != localRank) return std::nullopt;
      return slots[static_cast<size_t>(rank - first)];
    }
    first += n;
  }
  return std::nullopt;
}

int launchSlot(int rank, int localRank) {
  const char* text = std::getenv(kSlotsEnv);
  if (text == nullptr || *text == '\0') return localRank;
  return slotInPlan(parseSlotPlan(text), rank, localRank).value_or(localRank);
}

}  // namespace bigbatch
