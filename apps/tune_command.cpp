#include "tune_command.h"

#include <fmt/format.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/tune/process_trial_runner.h"
#include "bigbatch/tune/tuner.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

std::string readText(const std::string& path) {
  std::ifstream in(path);
  BIGBATCH_REQUIRE(in.good(), IoError, "cannot read '{}'; pass an existing TOML recipe", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeText(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  BIGBATCH_REQUIRE(out.good(), IoError, "cannot write '{}'; check the disk and permissions",
                   path.string());
}

// The settings of one search: the [tune] table overlaid by the command line.
struct TuneSettings {
  std::vector<std::string> params;
  int trials = 12, eta = 3, parallel = 1, seeds = 2;
  int64_t budgetEpochs = 0;             // 0: no cap
  bool includeRecipe = false;           // trial 0: the recipe's own values
  double minEpochs = 1, maxEpochs = 0;  // 0: train.epochs (or the largest searched)
  std::string objective = "accuracy";
  int64_t seed = 1;
};

TuneSettings readTuneTable(const std::string& text, const std::string& origin) {
  TuneSettings s;
  toml::table doc;
  try {
    doc = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    BIGBATCH_THROW(InvalidArgument, "{}:{}:{}: TOML syntax error: {}", origin,
                   e.source().begin.line, e.source().begin.column, e.description());
  }
  const toml::table* t = doc["tune"].as_table();
  if (!t) return s;
  for (const auto& [key, node] : *t) {
    const std::string k(key.str());
    const auto need = [&](bool ok, const char* what) {
      BIGBATCH_REQUIRE(ok, InvalidArgument, "{}: [tune] {} must be {}", origin, k, what);
    };
    if (k == "params") {
      const toml::array* a = node.as_array();
      need(a != nullptr, "a list of \"key=spec\" strings");
      for (const auto& e : *a) {
        need(e.is_string(), "a list of \"key=spec\" strings");
        s.params.push_back(*e.value<std::string>());
      }
    } else if (k == "include_recipe") {
      need(node.is_boolean(), "true or false");
      s.includeRecipe = *node.value<bool>();
    } else if (k == "objective") {
      need(node.is_string(), "\"accuracy\" or \"time\"");
      s.objective = *node.value<std::string>();
    } else if (k == "min_epochs" || k == "max_epochs") {
      need(node.is_number(), "a number of epochs");
      (k == "min_epochs" ? s.minEpochs : s.maxEpochs) = *node.value<double>();
    } else if (k == "trials" || k == "eta" || k == "parallel" || k == "seeds" || k == "seed" ||
               k == "budget_epochs") {
      need(node.is_integer(), "a whole number");
      const auto v = *node.value<int64_t>();
      if (k == "seed" || k == "budget_epochs") {
        (k == "seed" ? s.seed : s.budgetEpochs) = v;
      } else {
        (k == "trials"     ? s.trials
         : k == "eta"      ? s.eta
         : k == "parallel" ? s.parallel
                           : s.seeds) = static_cast<int>(v);
      }
    } else {
      BIGBATCH_THROW(InvalidArgument,
                     "{}: unknown [tune] key '{}'; the table takes params, trials, min_epochs, "
                     "max_epochs, eta, budget_epochs, include_recipe, objective, seed, parallel, "
                     "seeds",
                     origin, k);
    }
  }
  return s;
}

// The largest value a search over train.epochs can give, or 0.
double largestSearchedEpochs(const std::vector<SearchParameter>& params) {
  for (const auto& p : params) {
    if (p.key != "train.epochs") continue;
    if (p.kind != SearchParameter::kChoice) return p.hi;
    double most = 0;
    for (const auto& c : p.choices) {
      size_t used = 0;
      double v = 0;
      try {
        v = std::stod(c, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      BIGBATCH_REQUIRE(used == c.size() && v >= 1, InvalidArgument,
                       "tune parameter 'train.epochs': '{}' is not a whole number of epochs", c);
      most = std::max(most, v);
    }
    return most;
  }
  return 0;
}

// Every key and bound of the space, and the overrides, applied to the
// recipe: a bad key or value fails now, naming it, not in trial 7.
void checkSpace(const Config& recipe, const std::vector<SearchParameter>& params) {
  for (const auto& p : params) {
    for (const auto& f : recipe.schema()) {
      BIGBATCH_REQUIRE(f.key != p.key || f.type != ConfigType::kInt ||
                           p.kind == SearchParameter::kChoice ||
                           p.kind == SearchParameter::kInteger,
                       InvalidArgument,
                       "tune parameter '{}' is a whole number: give its range as lo:hi:int (or a "
                       "list), not a real range",
                       p.key);
    }
    std::vector<std::string> values = p.choices;
    if (p.kind != SearchParameter::kChoice) {
      values = {fmt::format("{}", p.kind == SearchParameter::kInteger ? std::round(p.lo) : p.lo),
                fmt::format("{}", p.kind == SearchParameter::kInteger ? std::round(p.hi) : p.hi)};
    }
    for (const auto& v : values) {
      Config c = recipe;
      try {
        c.set(p.key + "=" + v);
      } catch (const Error& e) {
        BIGBATCH_THROW(InvalidArgument, "tune parameter '{}': {}", p.key, e.what());
      }
    }
  }
}

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

nlohmann::ordered_json settingsJson(const TuneSettings& s, const std::vector<std::string>& sets) {
  nlohmann::ordered_json j;
  j["params"] = s.params;
  j["sets"] = sets;
  j["trials"] = s.trials;
  j["min_epochs"] = s.minEpochs;
  j["max_epochs"] = s.maxEpochs;
  j["eta"] = s.eta;
  j["budget_epochs"] = s.budgetEpochs;
  j["include_recipe"] = s.includeRecipe;
  j["objective"] = s.objective;
  j["seed"] = s.seed;
  j["parallel"] = s.parallel;
  j["seeds"] = s.seeds;
  return j;
}

std::string selfPath() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  BIGBATCH_REQUIRE(!ec, IoError, "tune: cannot find the bigbatch binary (/proc/self/exe: {})",
                   ec.message());
  return p.string();
}

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

// best.json, best.toml and the summary on the terminal.
void writeOutcome(const fs::path& dir, const std::string& origin, const std::string& recipeText,
                  const Config& recipe, const std::vector<std::string>& sets, const TuneSettings& s,
                  const TuneResult& r) {
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

}  // namespace

// The tune directory: on a fresh start it must hold no tune and gets the
// recipe and settings; on --resume they must equal what it was started with.
static void prepareTuneDir(const fs::path& dir, const TuneArgs& a, const std::string& recipeText,
                           const nlohmann::ordered_json& settings) {
  fs::create_directories(dir);
  if (a.resume && fs::exists(dir / "tune.json")) {
    nlohmann::ordered_json before;
    std::ifstream(dir / "tune.json") >> before;
    for (const auto& [key, value] : settings.items()) {
      BIGBATCH_REQUIRE(before.contains(key) && before[key] == value, InvalidArgument,
                       "tune --resume: {} was started with {} = {}, now {}; resume with the same "
                       "settings, or start a new --dir",
                       dir.string(), key, before.contains(key) ? before[key].dump() : "(none)",
                       value.dump());
    }
    BIGBATCH_REQUIRE(readText((dir / "recipe.toml").string()) == recipeText, InvalidArgument,
                     "tune --resume: {} differs from the recipe this tune started from ({}); "
                     "resume with that recipe, or start a new --dir",
                     a.config, (dir / "recipe.toml").string());
  } else {
    BIGBATCH_REQUIRE(!fs::exists(dir / "results.csv"), InvalidArgument,
                     "'{}' already holds a tune (results.csv); continue it with --resume, or "
                     "give another --dir",
                     dir.string());
    writeText(dir / "recipe.toml", recipeText);
    writeText(dir / "tune.json", settings.dump(2) + "\n");
  }
}

CLI::App* addTuneCommand(CLI::App& app, TuneArgs& a) {
  auto* tune = app.add_subcommand(
      "tune",
      "search a recipe's hyperparameters by asynchronous successive halving, each trial a "
      "training run; writes results.csv and best.toml (docs/LARGE_BATCH.md)");
  tune->add_option("config", a.config, "the TOML recipe every trial starts from")
      ->required()
      ->check(CLI::ExistingFile);
  tune->add_option("--param", a.params,
                   "a key to search: key=lo:hi (uniform), lo:hi:log, lo:hi:int, or a,b,c (a|b|c "
                   "for lists); repeatable; replaces the recipe's [tune] params");
  tune->add_option("--set", a.sets,
                   "override a recipe key for every trial, e.g. --set train.eval_every=2");
  tune->add_option("--dir", a.dir, "the tune directory (default: tune/<recipe stem>)");
  tune->add_option("--trials", a.trials, "trials started at the lowest rung (default 12)")
      ->check(CLI::Range(1, 100000));
  tune->add_option("--min-epochs", a.minEpochs, "epochs of the lowest rung (default 1)")
      ->check(CLI::PositiveNumber);
  tune->add_option("--max-epochs", a.maxEpochs,
                   "epochs of the top rung, the recipe's budget (default: train.epochs, or the "
                   "largest searched)")
      ->check(CLI::PositiveNumber);
  tune->add_option("--eta", a.eta, "keep the best 1/eta of each rung (default 3)")
      ->check(CLI::Range(2, 1000));
  tune->add_option("--budget-epochs", a.budgetEpochs,
                   "epochs the search may train in all, seed re-runs excluded (default: no cap; "
                   "successive halving promotes as rungs allow, so --trials alone does not bound "
                   "them)")
      ->check(CLI::Range(1LL, 100000000LL));
  tune->add_flag("--include-recipe", a.includeRecipe,
                 "trial 0 runs the recipe's own values of the searched keys, so the search "
                 "competes with the recipe it refines (default: every trial drawn)");
  tune->add_option("--objective", a.objective,
                   "accuracy (the last evaluation's, larger is better) or time (seconds to "
                   "train.target_accuracy, smaller is better; trials stop at the target)")
      ->check(CLI::IsMember({"accuracy", "time"}));
  tune->add_option("--seed", a.seed, "seed of the trial values' draws (default 1)")
      ->check(CLI::Range(0LL, 4294967295LL));
  tune->add_option("--parallel", a.parallel,
                   "jobs at once, the CPUs split evenly between them (default 1; 1 with "
                   "--objective time)")
      ->check(CLI::Range(1, 256));
  tune->add_option("--seeds", a.seeds,
                   "re-runs of the best trial with run.seed + 1, + 2, ... (default 2)")
      ->check(CLI::Range(0, 100));
  tune->add_flag("--resume", a.resume,
                 "continue the tune in --dir: finished jobs are not run again, the ones a kill "
                 "interrupted continue from their checkpoints");
  return tune;
}

namespace {

// The recipe's [tune] table, overridden flag by flag, checked.
TuneSettings resolveSettings(const TuneArgs& a, const std::string& recipeText) {
  TuneSettings s = readTuneTable(recipeText, a.config);
  if (!a.params.empty()) s.params = a.params;
  if (a.trials > 0) s.trials = a.trials;
  if (a.eta > 0) s.eta = a.eta;
  if (a.parallel > 0) s.parallel = a.parallel;
  if (a.seeds >= 0) s.seeds = a.seeds;
  if (a.minEpochs > 0) s.minEpochs = a.minEpochs;
  if (a.maxEpochs > 0) s.maxEpochs = a.maxEpochs;
  if (!a.objective.empty()) s.objective = a.objective;
  if (a.seed >= 0) s.seed = a.seed;
  if (a.budgetEpochs > 0) s.budgetEpochs = a.budgetEpochs;
  if (a.includeRecipe) s.includeRecipe = true;
  for (const double e : {s.minEpochs, s.maxEpochs}) {
    BIGBATCH_REQUIRE(e >= 0 && e == std::floor(e), InvalidArgument,
                     "tune: rung epochs are whole epochs (a run stops at an epoch's end); got {}",
                     e);
  }
  BIGBATCH_REQUIRE(s.objective == "accuracy" || s.objective == "time", InvalidArgument,
                   "tune: objective '{}' is neither accuracy nor time", s.objective);
  // Time ranks trials by their wall clock, and P jobs at once share this
  // machine's memory bandwidth and caches: each trial's time would be
  // measured beside whichever trials happened to run with it.
  BIGBATCH_REQUIRE(s.objective != "time" || s.parallel == 1, InvalidArgument,
                   "tune: --objective time ranks trials by wall-clock time, which {} jobs at "
                   "once on this machine would distort (each timed beside the others); use "
                   "--parallel 1 with --objective time, or --objective accuracy",
                   s.parallel);
  return s;
}

// The recipe as every trial sees it — the --set overrides, the epoch budget
// the top rung runs, the stop at the target the time objective needs —
// checked once with every bound. Settles s.maxEpochs when it was left open.
struct TrialRecipe {
  Config config;
  std::vector<std::string> sets;  // what every trial is started with
};
TrialRecipe trialRecipe(const TuneArgs& a, const std::string& recipeText, TuneSettings& s,
                        const std::vector<SearchParameter>& params) {
  TrialRecipe t{defaultTrainingConfig(), a.sets};
  Config& recipe = t.config;
  recipe.mergeToml(recipeText, a.config);
  for (const auto& o : t.sets) recipe.set(o);
  const double searchedEpochs = largestSearchedEpochs(params);
  if (s.maxEpochs <= 0) {
    s.maxEpochs =
        searchedEpochs > 0 ? searchedEpochs : static_cast<double>(recipe.getInt("train.epochs"));
  }
  if (searchedEpochs == 0 && s.maxEpochs != static_cast<double>(recipe.getInt("train.epochs"))) {
    t.sets.push_back(fmt::format("train.epochs={}", std::llround(s.maxEpochs)));
    recipe.set(t.sets.back());
  }
  BIGBATCH_REQUIRE(searchedEpochs == 0 || s.maxEpochs >= searchedEpochs, InvalidArgument,
                   "tune: --max-epochs {} is below the largest train.epochs searched ({}); the "
                   "top rung must run every trial's whole budget",
                   s.maxEpochs, searchedEpochs);
  if (s.objective == "time") {
    t.sets.push_back("train.stop_at_target=true");
    recipe.set(t.sets.back());
  }
  validateTrainingConfig(recipe);
  checkSpace(recipe, params);
  return t;
}

TuneOptions tunerOptions(const fs::path& dir, const TuneArgs& a, const TuneSettings& s,
                         const Config& recipe, const std::vector<SearchParameter>& params) {
  TuneOptions options;
  options.dir = dir.string();
  options.asha.minEpochs = std::min(s.minEpochs, s.maxEpochs);
  options.asha.maxEpochs = s.maxEpochs;
  options.asha.eta = s.eta;
  options.asha.maxTrials = s.trials;
  options.asha.maximize = s.objective == "accuracy";
  options.objective = s.objective == "time" ? TuneObjective::kTime : TuneObjective::kAccuracy;
  options.parallel = s.parallel;
  options.extraSeeds = s.seeds;
  options.seed = recipe.getInt("run.seed");
  options.resume = a.resume;
  options.budgetEpochs = s.budgetEpochs;
  if (s.includeRecipe) {
    for (const auto& p : params)
      options.firstValues.push_back(p.key + "=" + recipe.valueText(p.key));
  }
  return options;
}

void announce(const TuneOptions& options, const TuneSettings& s, const fs::path& dir) {
  AshaScheduler rungs(options.asha);
  std::string list;
  for (int k = 0; k < rungs.rungs(); ++k) {
    list += fmt::format("{}{:g}", k ? ", " : "", rungs.epochsAt(k));
  }
  fmt::print(
      "tune: {} trials, rungs at epochs [{}], eta {}, objective {}, {} job(s) at once; "
      "directory {}\n",
      s.trials, list, s.eta, s.objective, s.parallel, dir.string());
  std::fflush(stdout);
}

}  // namespace

// Settings, search space and recipe checked before anything is created;
// then the tune directory, the trial runner and the search.
int runTune(const TuneArgs& a) {
  // model.path and data.path made absolute: the trials run the copy in --dir.
  const std::string recipeText = resolvedRecipeText(a.config);
  TuneSettings s = resolveSettings(a, recipeText);
  std::vector<SearchParameter> params;
  for (const auto& p : s.params) params.push_back(parseSearchParameter(p));
  SearchSpace space(params, static_cast<uint64_t>(s.seed));
  const TrialRecipe recipe = trialRecipe(a, recipeText, s, params);

  const fs::path dir =
      a.dir.empty() ? fs::path("tune") / fs::path(a.config).stem() : fs::path(a.dir);
  prepareTuneDir(dir, a, recipeText, settingsJson(s, recipe.sets));
  const TuneOptions options = tunerOptions(dir, a, s, recipe.config, params);

  ProcessTrialRunnerOptions ro;
  ro.program = selfPath();
  ro.config = (dir / "recipe.toml").string();
  ro.dir = dir.string();
  ro.sets = recipe.sets;
  ro.slots = s.parallel;
  ProcessTrialRunner runner(ro);
  Tuner tuner(options, space, runner);
  announce(options, s, dir);
  writeOutcome(dir, a.config, recipeText, recipe.config, recipe.sets, s, tuner.run());
  return 0;
}

}  // namespace bigbatch
