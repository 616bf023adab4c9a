#include "bigbatch/collectives/allreduce_selector.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdint>

#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"

namespace bigbatch {

AllreduceTable defaultAllreduceTable() {
  // Seeded from `bigbatch bench allreduce` with 2 and 4 ranks on the 2-core
  // development machine (docs/BENCHMARKS.md): the shared-memory path wins at
  // every size on one host. Across hosts nothing has been measured here; the
  // hierarchical algorithm keeps the inter-host traffic at 2·S/L per rank.
  AllreduceTable t;
  t.singleHost = {{SIZE_MAX, "shm"}};
  t.multiHost = {{SIZE_MAX, "hierarchical"}};
  return t;
}

namespace {

size_t parseSize(const std::string& text, const std::string& spec) {
  size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  std::string suffix = text.substr(pos);
  size_t mult = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") mult = size_t{1} << 10;
  else if (suffix == "M" || suffix == "MiB") mult = size_t{1} << 20;
  else if (suffix == "G" || suffix == "GiB") mult = size_t{1} << 30;
  else if (!suffix.empty() || pos == 0) {
    BIGBATCH_THROW(InvalidArgument,
                   "allreduce table '{}': '{}' is not a size in bytes (e.g. 65536, 64K, 4M)", spec,
                   text);
  }
  return static_cast<size_t>(v) * mult;
}

std::string formatSize(size_t b) {
  if (b >= (size_t{1} << 30) && b % (size_t{1} << 30) == 0) return fmt::format("{}G", b >> 30);
  if (b >= (size_t{1} << 20) && b % (size_t{1} << 20) == 0) return fmt::format("{}M", b >> 20);
  if (b >= (size_t{1} << 10) && b % (size_t{1} << 10) == 0) return fmt::format("{}K", b >> 10);
  return std::to_string(b);
}

}  // namespace

std::vector<AllreduceRule> parseAllreduceRules(const std::string& spec) {
  std::vector<AllreduceRule> rules;
  const auto names = allreduceNames();
  size_t a = 0;
  while (a <= spec.size()) {
    size_t b = spec.find(',', a);
    if (b == std::string::npos) b = spec.size();
    const std::string entry = spec.substr(a, b - a);
    const size_t colon = entry.find(':');
    AllreduceRule rule{SIZE_MAX, colon == std::string::npos ? entry : entry.substr(colon + 1)};
    if (colon != std::string::npos) rule.belowBytes = parseSize(entry.substr(0, colon), spec);
    if (std::find(names.begin(), names.end(), rule.algorithm) == names.end()) {
      BIGBATCH_THROW(InvalidArgument, "allreduce table '{}': unknown algorithm '{}'; choose {}",
                     spec, rule.algorithm, fmt::join(names, ", "));
    }
    if (!rules.empty() && rule.belowBytes <= rules.back().belowBytes) {
      BIGBATCH_THROW(InvalidArgument,
                     "allreduce table '{}': sizes must increase from entry to entry", spec);
    }
    rules.push_back(rule);
    a = b + 1;
  }
  BIGBATCH_REQUIRE(!rules.empty() && rules.back().belowBytes == SIZE_MAX, InvalidArgument,
                   "allreduce table '{}': the last entry must be a bare algorithm name (no size) "
                   "covering the largest messages, e.g. '64K:recursive_doubling,shm'",
                   spec);
  return rules;
}

std::string formatAllreduceRules(const std::vector<AllreduceRule>& rules) {
  std::string out;
  for (const auto& r : rules) {
    if (!out.empty()) out += ",";
    if (r.belowBytes != SIZE_MAX) out += formatSize(r.belowBytes) + ":";
    out += r.algorithm;
  }
  return out;
}

AutoAllreduce::AutoAllreduce(AllreduceOptions options, AllreduceTable table)
    : Allreduce(options), table_(std::move(table)) {
  AllreduceOptions inner = options_;
  inner.checkSignature = false;  // the auto algorithm's run() checked the call
  for (const auto& rule : table_.singleHost) single_.push_back(makeAllreduce(rule.algorithm, inner));
  for (const auto& rule : table_.multiHost) multi_.push_back(makeAllreduce(rule.algorithm, inner));
  ring_ = makeAllreduce("ring", inner);
  mpi_ = makeAllreduce("mpi", inner);
}

size_t AutoAllreduce::pick(Communicator& comm, size_t bytes, bool& oneHost) {
  oneHost = comm.localSize() == comm.size();
  const auto& rules = oneHost ? table_.singleHost : table_.multiHost;
  std::atomic<bool>& logged = oneHost ? loggedSingle_ : loggedMulti_;
  if (comm.rank() == 0 && !logged.exchange(true)) {
    log().info("allreduce: {} ranks on {} over {}; by message size: {}", comm.size(),
               oneHost ? "one host" : "several hosts", comm.transportName(), formatAllreduceRules(rules));
  }
  for (size_t i = 0; i + 1 < rules.size(); ++i) {
    if (bytes < rules[i].belowBytes) return i;
  }
  return rules.size() - 1;
}

const std::string& AutoAllreduce::choose(Communicator& comm, size_t bytes) {
  bool oneHost = true;
  const size_t i = pick(comm, bytes, oneHost);
  return (oneHost ? table_.singleHost : table_.multiHost)[i].algorithm;
}

int AutoAllreduce::sizeClassOf(size_t bytes) {
  int c = 0;
  while ((size_t{2} << c) <= bytes) ++c;
  return c;
}

std::vector<double> AutoAllreduce::tunedSeconds(const Communicator& comm, size_t bytes) {
  std::lock_guard<std::mutex> lock(trialsMutex_);
  auto it = trials_.find({comm.id(), sizeClassOf(bytes)});
  if (it == trials_.end() || it->second.winner < 0) return {};
  const int n = it->second.agreed[2] > 0 ? 3 : 2;
  return std::vector<double>(it->second.agreed, it->second.agreed + n);
}

std::string AutoAllreduce::tunedChoice(const Communicator& comm, size_t bytes) {
  std::lock_guard<std::mutex> lock(trialsMutex_);
  auto it = trials_.find({comm.id(), sizeClassOf(bytes)});
  if (it == trials_.end() || it->second.winner < 0) return "";
  if (it->second.winner == 1) return "ring";
  if (it->second.winner == 2) return "mpi";
  const bool oneHost = comm.localSize() == comm.size();
  const auto& rules = oneHost ? table_.singleHost : table_.multiHost;
  for (size_t i = 0; i + 1 < rules.size(); ++i) {
    if (bytes < rules[i].belowBytes) return rules[i].algorithm;
  }
  return rules.back().algorithm;
}

namespace {
constexpr const char* kTuningPrefix = "allreduce_tuning.";
}  // namespace

std::vector<AutoAllreduce::TunedChoice> AutoAllreduce::tunedChoices(const Communicator& comm) {
  std::lock_guard<std::mutex> lock(trialsMutex_);
  std::vector<TunedChoice> out;
  for (const auto& [key, t] : trials_) {
    if (key.first != comm.id() || t.winner < 0) continue;
    TunedChoice c;
    c.fromBytes = size_t{1} << key.second;
    c.toBytes = (size_t{2} << key.second) - 1;
    static const char* const kRestored[3] = {"the table's choice", "ring", "mpi"};
    c.algorithm = !t.choice.empty() ? t.choice : kRestored[t.winner];  // restored: its name unsaved
    for (int i = 0; i < 3; ++i) c.seconds[i] = t.agreed[i];
    out.push_back(std::move(c));
  }
  return out;
}

std::map<std::string, double> AutoAllreduce::tuningState(const Communicator& comm) {
  std::lock_guard<std::mutex> lock(trialsMutex_);
  std::map<std::string, double> out;
  for (const auto& [key, t] : trials_) {
    if (key.first != comm.id()) continue;
    const std::string p = fmt::format("{}{}.", kTuningPrefix, key.second);
    out[p + "calls"] = t.calls;
    out[p + "winner"] = t.winner;
    for (int c = 0; c < 3; ++c) {
      out[fmt::format("{}seconds{}", p, c)] = t.seconds[c];
      out[fmt::format("{}agreed{}", p, c)] = t.agreed[c];
    }
  }
  return out;
}

void AutoAllreduce::restoreTuning(const Communicator& comm,
                                  const std::map<std::string, double>& state) {
  std::lock_guard<std::mutex> lock(trialsMutex_);
  const std::string prefix = kTuningPrefix;
  for (const auto& [name, value] : state) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t dot = name.find('.', prefix.size());
    if (dot == std::string::npos) continue;
    const std::string digits = name.substr(prefix.size(), dot - prefix.size());
    if (digits.empty() || digits.size() > 2 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    const int sizeClass = std::stoi(digits);
    const std::string field = name.substr(dot + 1);
    Trial& t = trials_[{comm.id(), sizeClass}];
    if (field == "calls") t.calls = static_cast<int>(value);
    if (field == "winner") t.winner = static_cast<int>(value);
    for (int c = 0; c < 3; ++c) {
      if (field == fmt::format("seconds{}", c)) t.seconds[c] = value;
      if (field == fmt::format("agreed{}", c)) t.agreed[c] = value;
    }
  }
}

void AutoAllreduce::reduce(Communicator& comm, void* data, size_t count, DataType type) {
  dispatch(comm, data, count, type, nullptr);
}

void AutoAllreduce::reduceStaged(Communicator& comm, void* data, size_t count, DataType type,
                                 AllreduceStages& stages) {
  dispatch(comm, data, count, type, &stages);
}

void AutoAllreduce::dispatch(Communicator& comm, void* data, size_t count, DataType type,
                             AllreduceStages* stages) {
  auto call = [&](Allreduce& algorithm) {
    if (stages) {
      algorithm.run(comm, data, count, type, *stages);
    } else {
      algorithm.run(comm, data, count, type);
    }
  };
  bool oneHost = true;
  const size_t bytes = count * elementSize(type);
  const size_t i = pick(comm, bytes, oneHost);
  Allreduce& seeded = *(oneHost ? single_ : multi_)[i];
  const std::string seededName = (oneHost ? table_.singleHost : table_.multiHost)[i].algorithm;
  if (options_.tuneTrials <= 0 || seededName == "ring" || comm.size() == 1) {
    call(seeded);
    return;
  }
  const int sizeClass = sizeClassOf(bytes);
  Trial* trial;
  {
    std::lock_guard<std::mutex> lock(trialsMutex_);
    trial = &trials_[{comm.id(), sizeClass}];
  }
  Allreduce* candidates[3] = {&seeded, ring_.get(), mpi_.get()};
  const int n =
      options_.tuneWithMpi && comm.transportName() == "MPI" && seededName != "mpi" ? 3 : 2;
  if (trial->winner >= 0) {
    call(*candidates[trial->winner]);
    return;
  }
  // Measuring: rotate through the candidates, the same way on every rank
  // (the call sequence of a collective is identical on all ranks). Each
  // candidate's first call is not timed (it may set up shared memory or
  // sub-communicators); of the rest the fastest counts, which is robust to
  // the odd descheduled call. A timed call starts right after a barrier,
  // as collective benchmarks time them (OSU, nccl-tests): otherwise a rank
  // that reaches the call early times its wait for the late one, and in a
  // training step that wait — rank imbalance, up to milliseconds — would
  // decide between algorithms that differ by microseconds.
  const int candidate = trial->calls % n;
  if (trial->calls >= n) comm.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  call(*candidates[candidate]);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (trial->calls >= n) {
    trial->seconds[candidate] = trial->calls < 2 * n ? s : std::min(trial->seconds[candidate], s);
  }
  if (++trial->calls < n * (options_.tuneTrials + 1)) return;
  // Agree on the slowest rank's best times (max over ranks), in nanoseconds.
  int64_t ns[3] = {0, 0, 0};
  for (int c = 0; c < n; ++c) ns[c] = static_cast<int64_t>(trial->seconds[c] * 1e9);
  allreduceMaxInt64(comm, ns, 3, /*tag=*/0x7f10);
  int best = 0;
  for (int c = 1; c < n; ++c) {
    if (ns[c] < ns[best]) best = c;
  }
  for (int c = 0; c < n; ++c) trial->agreed[c] = static_cast<double>(ns[c]) * 1e-9;
  trial->winner = best;
  static const char* const kNames[3] = {"", "ring", "mpi"};
  trial->choice = best ? kNames[best] : seededName;
  // At debug level: five such lines would come between a run's epoch lines
  // (tunedChoices() puts them in summary.json; -v shows them).
  if (comm.rank() == 0) {
    log().debug("allreduce tuned for {}..{} B on {} ranks: {} (best call: {} {:.1f} us, ring "
               "{:.1f} us{})",
               size_t{1} << sizeClass, (size_t{2} << sizeClass) - 1, comm.size(),
               best ? kNames[best] : seededName.c_str(), seededName, ns[0] / 1e3, ns[1] / 1e3,
               n == 3 ? fmt::format(", mpi {:.1f} us", ns[2] / 1e3) : std::string());
  }
}

}  // namespace bigbatch
