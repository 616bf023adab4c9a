#include "bigbatch/tune/tune_outcome.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"
#include "text_file.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
using tune_detail::writeText;

// The seeds' lines of best.toml's header and of the summary printed.
std::string seedLines(const TuneResult& r) {
  std::string lines;
  for (size_t i = 0; i < r.seeds.size(); ++i) {
    const TrialOutcome& o = r.seeds[i];
    lines += fmt::format(
        "#   run.seed {}: {}\n", r.seedValues[i],
        !o.ok ? "failed: " + o.error
              : fmt::format("accuracy {:.2f} % after {} epochs{}", 100 * o.accuracy, o.epochs,
                            o.reachedTarget ? fmt::format(", target at {:.1f} s", o.timeToTargetS)
                                            : ", target not reached"));
  }
  return lines;
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
}

// best.toml: the recipe with the best values (and the overrides) in place,
// read back to prove it is the recipe it claims to be.
void writeBestRecipe(const fs::path& dir, const std::string& origin, const std::string& recipeText,
                     const Config& recipe, const std::vector<std::string>& sets,
                     const TuneSettings& s, const TuneResult& r) {
  std::vector<std::string> assignments = sets;
  assignments.insert(assignments.end(), r.bestValues.begin(), r.bestValues.end());
  Config best = recipe;
  for (const auto& v : r.bestValues) best.set(v);
  const std::string text =
      fmt::format(
          "# Written by `bigbatch tune` from {} (trial {:03d} of {}; objective {}; {} "
          "epochs searched, {} more for the seeds). Tuned keys are marked `# bigbatch "
          "tune`.\n{}",
          origin, r.bestTrial, s.trials, s.objective, r.searchEpochs, r.seedEpochs, seedLines(r)) +
      applyToRecipe(recipeText, assignments, best);
  Config check = defaultTrainingConfig();
  check.mergeToml(text, (dir / "best.toml").string());
  for (const auto& v : assignments) {
    const std::string key = v.substr(0, v.find('='));
    BIGBATCH_REQUIRE(check.valueText(key) == best.valueText(key), Error,
                     "tune: best.toml gives {} = {}, not the tuned {}; the recipe's layout "
                     "defeated the rewrite — apply the values from best.json by hand",
                     key, check.valueText(key), best.valueText(key));
  }
  writeText(dir / "best.toml", text);
}

}  // namespace

// The recipe's text with `assignments` applied in place (comments kept) and
// its [tune] table left out: a ready recipe.
std::string applyToRecipe(const std::string& text, const std::vector<std::string>& assignments,
                          const Config& resolved) {
  std::vector<std::string> lines;
  {
    std::istringstream in(text);
    std::string line;
    bool inTune = false;
    while (std::getline(in, line)) {
      const auto first = line.find_first_not_of(" \t");
      const bool header = first != std::string::npos && line[first] == '[';
      if (header) inTune = line.compare(first, 6, "[tune]") == 0;
      if (!inTune) lines.push_back(line);
    }
  }
  const auto trimmed = [](const std::string& l) {
    const auto a = l.find_first_not_of(" \t");
    return a == std::string::npos ? std::string() : l.substr(a);
  };
  for (const auto& a : assignments) {
    const std::string key = a.substr(0, a.find('='));
    const std::string section = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
    const std::string entry =
        fmt::format("{} = {}  # bigbatch tune", name, resolved.valueText(key));
    size_t begin = lines.size();
    for (size_t i = 0; i < lines.size(); ++i) {
      if (trimmed(lines[i]).rfind("[" + section + "]", 0) == 0) begin = i + 1;
    }
    if (begin == lines.size()) {
      lines.push_back("");
      lines.push_back("[" + section + "]");
      lines.push_back(entry);
      continue;
    }
    size_t end = begin, lastKey = begin - 1;
    bool replaced = false;
    for (; end < lines.size() && trimmed(lines[end]).rfind('[', 0) != 0; ++end) {
      const std::string t = trimmed(lines[end]);
      if (t.empty() || t[0] == '#') continue;
      lastKey = end;
      std::string lhs = t.substr(0, t.find('='));
      lhs.erase(lhs.find_last_not_of(" \t") + 1);
      if (t.find('=') != std::string::npos && lhs == name) {
        lines[end] = entry;
        replaced = true;
      }
    }
    if (!replaced) lines.insert(lines.begin() + static_cast<long>(lastKey + 1), entry);
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

// best.json, best.toml and the summary on the terminal.
void writeTuneOutcome(const fs::path& dir, const std::string& origin, const std::string& recipeText,
                      const Config& recipe, const std::vector<std::string>& sets,
                      const TuneSettings& s, const TuneResult& r) {
  writeBestRecipe(dir, origin, recipeText, recipe, sets, s, r);
  // The figures are over the runs that trained the whole budget: when
  // --budget-epochs ended the search below the top rung, the best trial's
  // own run paused part-way, and averaging it with the seeds' whole runs
  // would mix two recipes' lengths.
  std::vector<double> accuracy, times;
  size_t partial = 0;
  for (const TrialOutcome& o : r.seeds) {
    if (o.ok && !o.complete) ++partial;
    if (!o.ok || !o.complete) continue;
    accuracy.push_back(o.accuracy);
    if (o.reachedTarget) times.push_back(o.timeToTargetS);
  }
  nlohmann::ordered_json j;
  j["best_trial"] = r.bestTrial;
  j["values"] = r.bestValues;
  j["objective"] = s.objective;
  j["runs"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.seeds.size(); ++i) {
    const TrialOutcome& o = r.seeds[i];
    j["runs"].push_back(
        {{"seed", r.seedValues[i]},
         {"ok", o.ok},
         {"accuracy", o.accuracy},
         {"reached_target", o.reachedTarget},
         {"time_to_target_s",
          o.reachedTarget ? nlohmann::ordered_json(o.timeToTargetS) : nlohmann::ordered_json()},
         {"epochs", o.epochs},
         {"complete", o.complete}});
  }
  j["mean_over_runs"] = accuracy.size();
  j["mean_accuracy"] = mean(accuracy);
  j["min_accuracy"] = accuracy.empty() ? 0.0 : *std::min_element(accuracy.begin(), accuracy.end());
  j["max_accuracy"] = accuracy.empty() ? 0.0 : *std::max_element(accuracy.begin(), accuracy.end());
  j["mean_time_to_target_s"] = !times.empty() && times.size() == accuracy.size()
                                   ? nlohmann::ordered_json(mean(times))
                                   : nlohmann::ordered_json();
  j["search_epochs"] = r.searchEpochs;
  j["seed_epochs"] = r.seedEpochs;
  j["jobs"] = r.jobs;
  j["failed_jobs"] = r.failed;
  writeText(dir / "best.json", j.dump(2) + "\n");

  std::string values;
  for (const auto& v : r.bestValues) values += " " + v;
  fmt::print("tune: best trial {:03d}:{}\n", r.bestTrial, values);
  fmt::print("{}", seedLines(r));
  if (partial > 0) {
    fmt::print(
        "tune: the best trial's search run paused at epoch {} when --budget-epochs ran out "
        "(below the top rung); the figures below are over the {} run(s) of the whole budget\n",
        r.seeds.front().epochs, accuracy.size());
  }
  fmt::print(
      "tune: mean accuracy {:.2f} % over {} seed(s) (spread {:.2f}..{:.2f} %){}; {} epochs "
      "searched in {} job(s) ({} failed), {} for the seeds\n",
      100 * mean(accuracy), accuracy.size(), 100 * j["min_accuracy"].get<double>(),
      100 * j["max_accuracy"].get<double>(),
      !times.empty() && times.size() == accuracy.size()
          ? fmt::format(", mean time to target {:.1f} s", mean(times))
          : "",
      r.searchEpochs, r.jobs, r.failed, r.seedEpochs);
  fmt::print("wrote {} and {}\n", (dir / "best.toml").string(), (dir / "best.json").string());
}

}  // namespace bigbatch
