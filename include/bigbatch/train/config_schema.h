// Every configuration key bigbatch understands: type, default, range and a
// one-line description. `bigbatch keys` prints this table and docs/CONFIG.md
// is generated from it, so the three never disagree.
#pragma once

#include "bigbatch/common/config.h"

namespace bigbatch {

std::vector<ConfigField> trainingConfigSchema();

// A Config holding every default of trainingConfigSchema(); a recipe's
// `[tune]` table (its search space, `bigbatch tune`) is skipped.
Config defaultTrainingConfig();

// The keys that name an input file or folder (model.path, data.path): a
// relative value written in a recipe file is read from that file's folder,
// so a recipe and its module travel together and run from any directory.
// A value given with --set stays relative to the current directory, as a
// path typed in a shell is.
const std::vector<std::string>& recipeRelativeKeys();

// The recipe file `path`'s TOML, with relative values of
// recipeRelativeKeys() made absolute against its folder (comments and
// formatting are not kept). Throws what Config::mergeFile throws.
std::string resolvedRecipeText(const std::string& path);

// Config::mergeFile of resolvedRecipeText(path).
void mergeRecipeFile(Config& config, const std::string& path);

// Cross-key checks that a single field's range cannot express.
void validateTrainingConfig(const Config& config);

// Whether the data set the config names opens — its files present and their
// headers sound (Fashion-MNIST, CIFAR-10), an image folder's splits and
// classes — without reading it: what `bigbatch train` checks before it
// starts its workers, so a missing file is one error, not one per rank and
// an MPI abort. Throws IoError or InvalidArgument naming the path and the fix.
void validateTrainingData(const Config& config);

// Markdown table of every key (for docs/CONFIG.md and `bigbatch keys`).
std::string describeConfigSchema(const std::vector<ConfigField>& schema, bool markdown);

}  // namespace bigbatch
