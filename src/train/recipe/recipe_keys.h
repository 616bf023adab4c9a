// Every configuration key, declared once: its schema (type, default, range,
// help — what `bigbatch keys` prints and docs/CONFIG.md is generated from)
// and where its value goes in the RunRecipe (recipe.h). resolveRecipe()
// reads the keys only through this table, so a key cannot be documented
// with one default and read with another, or read under a misspelt name.
//
// A few keys are used before there is a recipe — the run directory
// (run.name, run.dir, run.out_dir), the device (run.device, run.deterministic,
// amp.tf32), the launcher's worker count (run.workers) — and are read by
// name where they are used; their entry says where, and binds nothing.
//
// Internal to src/train. Pure; thread-safe after the first call.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bigbatch/common/config.h"
#include "recipe/recipe.h"

namespace bigbatch::train_detail {

// A key read by name where it is used, not into the recipe: where that is.
struct ReadBy {
  std::string where;
};

struct RecipeKey {
  using Bind = std::function<void(const Config&, const std::string& key, RunRecipe&)>;
  RecipeKey(ConfigField f, Bind b) : field(std::move(f)), bind(std::move(b)) {}
  RecipeKey(ConfigField f, ReadBy r) : field(std::move(f)), readBy(std::move(r.where)) {}

  ConfigField field;
  // Puts the config's value of field.key into the recipe; null for a key
  // read where it is used (`readBy` says where).
  Bind bind;
  std::string readBy;
};

// In the order docs/CONFIG.md lists them (run, data, model, train, ckpt,
// fault, ddp, amp, comm, optim, schedule, mlperf).
const std::vector<RecipeKey>& recipeKeys();

}  // namespace bigbatch::train_detail
