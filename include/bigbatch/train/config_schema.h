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

// Markdown table of every key (for docs/CONFIG.md and `bigbatch keys`).
std::string describeConfigSchema(const std::vector<ConfigField>& schema, bool markdown);

}  // namespace bigbatch
