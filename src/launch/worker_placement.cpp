#include "bigbatch/launch/worker_placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <tuple>

#include "bigbatch/common/error.h"
#include "bigbatch/common/launch_slot.h"

namespace bigbatch {
namespace {

struct NamedSlots {
  std::string name;
  int slots = 0;  // 0: not said
};

// A hostfile's hosts, in order: "NAME [slots=N] [max_slots=M]", # comments.
std::vector<NamedSlots> readHostfile(const std::string& path) {
  std::ifstream in(path);
  BIGBATCH_REQUIRE(in.good(), InvalidArgument,
                   "the launcher's hostfile '{}' cannot be read; correct BIGBATCH_MPIRUN", path);
  static const std::regex slots(R"(\bslots\s*=\s*(\d+))");
  std::vector<NamedSlots> out;
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    NamedSlots h;
    if (!(words >> h.name)) continue;
    std::smatch m;
    if (std::regex_search(line, m, slots)) h.slots = std::stoi(m[1]);
    out.push_back(h);
  }
  return out;
}

// "a:2,b" -> {a, 2}, {b, 1}.
std::vector<NamedSlots> parseHostList(const std::string& list) {
  std::vector<NamedSlots> out;
  std::istringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    if (item.empty()) continue;
    const size_t colon = item.rfind(':');
    NamedSlots h{item, 1};
    if (colon != std::string::npos) {
      h.name = item.substr(0, colon);
      h.slots = std::atoi(item.c_str() + colon + 1);
    }
    out.push_back(h);
  }
  return out;
}

// The value of the first of `names` among `words` ("--opt V" or "--opt=V").
std::optional<std::string> optionValue(const std::vector<std::string>& words,
                                       const std::vector<std::string>& names) {
  for (size_t i = 0; i < words.size(); ++i) {
    for (const std::string& n : names) {
      if (words[i] == n && i + 1 < words.size()) return words[i + 1];
      if (words[i].rfind(n + "=", 0) == 0) return words[i].substr(n.size() + 1);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<WorkerPlacement> WorkerPlacement::forLauncher(
    const std::vector<std::string>& launcher, int workers, std::string* why) {
  std::vector<NamedSlots> named;
  if (auto file = optionValue(launcher, {"--hostfile", "-hostfile", "--machinefile",
                                         "-machinefile", "--default-hostfile"})) {
    named = readHostfile(*file);
  } else if (auto list = optionValue(launcher, {"--host", "-host", "-H"})) {
    named = parseHostList(*list);
  } else {
    const char* nodes = std::getenv("SLURM_JOB_NUM_NODES");
    if (nodes != nullptr && std::atoi(nodes) > 1) {
      *why = "the ranks run on the nodes of a Slurm allocation, which the launcher does not list";
      return std::nullopt;
    }
    WorkerPlacement p;
    p.hosts_.push_back({"", {}});
    for (int s = 0; s < workers; ++s) p.hosts_[0].slots.push_back(s);
    return p;
  }
  WorkerPlacement p;
  int left = workers;
  for (const NamedSlots& h : named) {
    if (left == 0) break;
    if (h.slots <= 0) {
      *why = fmt::format("the launcher gives host '{}' no slots=N, so where mpirun puts the ranks "
                         "depends on its core count",
                         h.name);
      return std::nullopt;
    }
    Host host{h.name, {}};
    for (int s = 0; s < h.slots && left > 0; ++s, --left) host.slots.push_back(s);
    p.hosts_.push_back(std::move(host));
  }
  if (left > 0) {
    *why = fmt::format("the launcher's hosts offer {} slot(s) for {} workers (mpirun "
                       "oversubscribes them)",
                       workers - left, workers);
    return std::nullopt;
  }
  return p;
}

WorkerPlacement WorkerPlacement::fromReports(const std::vector<RankPlace>& places) {
  WorkerPlacement p;
  for (const RankPlace& r : places) {
    int h = p.hostOf(r);
    if (h < 0) {
      p.hosts_.push_back({r.host.name, {}});
      h = static_cast<int>(p.hosts_.size()) - 1;
    }
    auto& slots = p.hosts_[static_cast<size_t>(h)].slots;
    slots.insert(std::upper_bound(slots.begin(), slots.end(), r.slot), r.slot);
  }
  return p;
}

int WorkerPlacement::workers() const {
  int n = 0;
  for (const Host& h : hosts_) n += static_cast<int>(h.slots.size());
  return n;
}

std::pair<int, int> WorkerPlacement::placeOf(int rank) const {
  BIGBATCH_REQUIRE(rank >= 0 && rank < workers(), InvalidArgument,
                   "rank {} is not one of the placement's {} workers", rank, workers());
  int first = 0;
  for (size_t h = 0; h < hosts_.size(); ++h) {
    const int n = static_cast<int>(hosts_[h].slots.size());
    if (rank < first + n) return {static_cast<int>(h), hosts_[h].slots[rank - first]};
    first += n;
  }
  return {-1, -1};  // unreachable: the require above
}

int WorkerPlacement::hostOf(const RankPlace& place) const {
  if (hosts_.size() == 1 && hosts_[0].name.empty()) return 0;  // the one local host
  for (size_t h = 0; h < hosts_.size(); ++h) {
    if (namesHost(hosts_[h].name, place.host)) return static_cast<int>(h);
  }
  return -1;
}

std::string WorkerPlacement::drop(int rank, const std::vector<RankPlace>& places) {
  int h = -1, slot = -1;
  std::string unmatched;  // the rank said where it ran, in no host the launcher names
  for (const RankPlace& r : places) {
    if (r.rank != rank) continue;
    h = hostOf(r);
    slot = r.slot;
    if (h >= 0) {
      const auto& slots = hosts_[static_cast<size_t>(h)].slots;
      if (std::find(slots.begin(), slots.end(), slot) == slots.end()) h = -1;
    }
    if (h < 0) unmatched = fmt::format("{} (slot {})", r.host.name, r.slot);
  }
  const bool reported = h >= 0;
  if (!reported) std::tie(h, slot) = placeOf(rank);
  Host& host = hosts_[static_cast<size_t>(h)];
  host.slots.erase(std::find(host.slots.begin(), host.slots.end(), slot));
  dropped_ = true;
  const std::string name = host.name.empty() ? std::string("this host") : "host " + host.name;
  std::string out = fmt::format("slot {} of {}", slot, name);
  if (host.slots.empty()) {
    out += ", its last: the host";
    hosts_.erase(hosts_.begin() + h);
  }
  if (!reported && unmatched.empty()) {
    out += " (as mapping by slot places it: the rank never said where it ran)";
  } else if (!reported) {
    out += fmt::format(
        " (as mapping by slot places it: the rank said it ran on {}, which no host the launcher "
        "names matches by name or address; name hosts in the hostfile as they name themselves)",
        unmatched);
  }
  return out;
}

std::string WorkerPlacement::slotPlan() const {
  std::vector<HostSlots> plan;
  for (const Host& h : hosts_) plan.push_back({h.name, h.slots});
  return formatSlotPlan(plan);
}

}  // namespace bigbatch
