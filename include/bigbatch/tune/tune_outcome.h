// The end of a `bigbatch tune` search: best.toml (the recipe with the best
// trial's values in place, comments kept, read back to prove it is the
// recipe it claims to be), best.json (the best values and every seed's run)
// and the summary on the terminal.
//
// Writes files in the tune directory; the caller's thread.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "bigbatch/common/config.h"
#include "bigbatch/tune/tune_settings.h"
#include "bigbatch/tune/tuner.h"

namespace bigbatch {

// The recipe's text with `assignments` ("key=value") applied in place
// (comments kept) and its [tune] table left out: a ready recipe. `resolved`
// gives each value as the schema writes it.
std::string applyToRecipe(const std::string& text, const std::vector<std::string>& assignments,
                          const Config& resolved);

// best.toml, best.json and the summary for the search's result `r`.
void writeTuneOutcome(const std::filesystem::path& dir, const std::string& origin,
                      const std::string& recipeText, const Config& recipe,
                      const std::vector<std::string>& sets, const TuneSettings& s,
                      const TuneResult& r);

}  // namespace bigbatch
