// What `bigbatch tune RECIPE.toml` was asked, as its command line gives it
// (apps/tune_command.h declares the options): every field left at its
// "unset" value takes the recipe's [tune] table, else the default
// (tune_settings.h).
//
// A value type; thread-compatible.
#pragma once

#include <string>
#include <vector>

namespace bigbatch {

struct TuneRequest {
  std::string config;                                 // the recipe every trial starts from
  std::vector<std::string> params;                    // --param key=spec; empty: the [tune] table's
  std::vector<std::string> sets;                      // --set key=value for every trial
  std::string dir;                                    // default: tune/<recipe stem>
  int trials = 0, eta = 0, parallel = 0, seeds = -1;  // 0 / -1: unset
  double minEpochs = 0, maxEpochs = 0;                // 0: from the [tune] table, else defaults
  std::string objective;                              // "": unset
  long long seed = -1;
  long long budgetEpochs = 0;
  bool includeRecipe = false;
  bool resume = false;
};

}  // namespace bigbatch
