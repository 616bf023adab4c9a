// The settings of one `bigbatch tune` search: the recipe's [tune] table
// overlaid by the command line (TuneRequest), and the checks that refuse a
// bad key, bound or combination before anything runs — not in trial 7.
//
// Pure functions of their inputs; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bigbatch/common/config.h"
#include "bigbatch/tune/search_space.h"
#include "bigbatch/tune/tune_request.h"

namespace bigbatch {

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

// The recipe's [tune] table (defaults where it says nothing); throws
// InvalidArgument naming `origin` and the key for a bad one.
TuneSettings readTuneTable(const std::string& text, const std::string& origin);

// The [tune] table of `recipeText`, overridden flag by flag by `request`,
// checked (whole-epoch rungs, a known objective, --parallel 1 with time).
TuneSettings resolveTuneSettings(const TuneRequest& request, const std::string& recipeText);

// The largest value a search over train.epochs can give, or 0.
double largestSearchedEpochs(const std::vector<SearchParameter>& params);

// Every key and bound of the space applied to the recipe: throws
// InvalidArgument naming the parameter when one does not fit.
void checkSearchSpace(const Config& recipe, const std::vector<SearchParameter>& params);

// tune.json: the settings a --resume must find again.
nlohmann::ordered_json tuneSettingsJson(const TuneSettings& s,
                                        const std::vector<std::string>& sets);

}  // namespace bigbatch
