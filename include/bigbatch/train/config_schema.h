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
