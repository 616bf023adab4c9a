#include "bigbatch/tune/tune_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/tune/asha.h"
#include "bigbatch/tune/process_trial_runner.h"
#include "bigbatch/tune/search_space.h"
#include "bigbatch/tune/tune_outcome.h"
#include "bigbatch/tune/tune_settings.h"
#include "bigbatch/tune/tuner.h"
#include "text_file.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;
using tune_detail::readText;
using tune_detail::writeText;

std::string selfPath() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  BIGBATCH_REQUIRE(!ec, IoError, "tune: cannot find the bigbatch binary (/proc/self/exe: {})",
                   ec.message());
  return p.string();
}

// The tune directory: on a fresh start it must hold no tune and gets the
// recipe and settings; on --resume they must equal what it was started with.
void prepareTuneDir(const fs::path& dir, const TuneRequest& a, const std::string& recipeText,
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

// The recipe as every trial sees it — the --set overrides, the epoch budget
// the top rung runs, the stop at the target the time objective needs —
// checked once with every bound. Settles s.maxEpochs when it was left open.
struct TrialRecipe {
  Config config;
  std::vector<std::string> sets;  // what every trial is started with
};
TrialRecipe trialRecipe(const TuneRequest& a, const std::string& recipeText, TuneSettings& s,
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
  checkSearchSpace(recipe, params);
  return t;
}

TuneOptions tunerOptions(const fs::path& dir, const TuneRequest& a, const TuneSettings& s,
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
int runTune(const TuneRequest& a) {
  // model.path and data.path made absolute: the trials run the copy in --dir.
  const std::string recipeText = resolvedRecipeText(a.config);
  TuneSettings s = resolveTuneSettings(a, recipeText);
  std::vector<SearchParameter> params;
  for (const auto& p : s.params) params.push_back(parseSearchParameter(p));
  SearchSpace space(params, static_cast<uint64_t>(s.seed));
  const TrialRecipe recipe = trialRecipe(a, recipeText, s, params);

  const fs::path dir =
      a.dir.empty() ? fs::path("tune") / fs::path(a.config).stem() : fs::path(a.dir);
  prepareTuneDir(dir, a, recipeText, tuneSettingsJson(s, recipe.sets));
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
  writeTuneOutcome(dir, a.config, recipeText, recipe.config, recipe.sets, s, tuner.run());
  return 0;
}

}  // namespace bigbatch
