#include "bigbatch/tune/tune_settings.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>

#include "bigbatch/common/error.h"
#include "bigbatch/common/parse_number.h"

namespace bigbatch {

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

// The recipe's [tune] table, overridden flag by flag, checked.
TuneSettings resolveTuneSettings(const TuneRequest& a, const std::string& recipeText) {
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

// The largest value a search over train.epochs can give, or 0.
double largestSearchedEpochs(const std::vector<SearchParameter>& params) {
  for (const auto& p : params) {
    if (p.key != "train.epochs") continue;
    if (p.kind != SearchParameter::kChoice) return p.hi;
    double most = 0;
    for (const auto& c : p.choices) {
      const std::optional<double> v = parseWholeDouble(c);
      BIGBATCH_REQUIRE(v && *v >= 1, InvalidArgument,
                       "tune parameter 'train.epochs': '{}' is not a whole number of epochs", c);
      most = std::max(most, *v);
    }
    return most;
  }
  return 0;
}

// Every key and bound of the space, and the overrides, applied to the
// recipe: a bad key or value fails now, naming it, not in trial 7.
void checkSearchSpace(const Config& recipe, const std::vector<SearchParameter>& params) {
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

nlohmann::ordered_json tuneSettingsJson(const TuneSettings& s,
                                        const std::vector<std::string>& sets) {
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

}  // namespace bigbatch
