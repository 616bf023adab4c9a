// The pieces recipe_keys.cpp and recipe_keys_step.cpp declare the keys
// with — F() for a key's schema, to()/with() for where its value goes,
// readWhereUsed() for a key read by name — and each section's table (one
// function per section, in docs/CONFIG.md's order). Internal to
// src/train/recipe; include only from those two files.
#pragma once

#include <limits>
#include <optional>
#include <type_traits>

#include "recipe/recipe_keys.h"

namespace bigbatch::train_detail {
namespace key_binding {

using T = ConfigType;
using L = std::vector<int64_t>;
using Bind = RecipeKey::Bind;
constexpr double kInf = std::numeric_limits<double>::infinity();

inline ConfigField F(std::string key, T type, ConfigValue def, std::string help,
              std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt,
              std::vector<std::string> choices = {}) {
  return ConfigField{std::move(key),    type, std::move(def), std::move(help), min, max,
                     std::move(choices)};
}

// The config's value of `key` as a V (the member it goes to): integers of
// any width from int keys, doubles from float keys, and so on.
template <class V>
V read(const Config& c, const std::string& key) {
  if constexpr (std::is_same_v<V, bool>) {
    return c.getBool(key);
  } else if constexpr (std::is_integral_v<V>) {
    return static_cast<V>(c.getInt(key));
  } else if constexpr (std::is_floating_point_v<V>) {
    return static_cast<V>(c.getFloat(key));
  } else if constexpr (std::is_same_v<V, std::string>) {
    return c.getString(key);
  } else if constexpr (std::is_same_v<V, std::vector<int64_t>>) {
    return c.getIntList(key);
  } else {
    static_assert(std::is_same_v<V, std::vector<double>>, "no config type for this member");
    return c.getFloatList(key);
  }
}

// The key's value into a member of the recipe, or of one of its parts.
template <class V>
Bind to(V RunRecipe::*member) {
  return [member](const Config& c, const std::string& key, RunRecipe& r) {
    r.*member = read<V>(c, key);
  };
}
template <class S, class V>
Bind to(S RunRecipe::*part, V S::*member) {
  return [part, member](const Config& c, const std::string& key, RunRecipe& r) {
    r.*part.*member = read<V>(c, key);
  };
}
inline ReadBy readWhereUsed(std::string where) { return ReadBy{std::move(where)}; }

// The key's value, read as a V, handed to `put` (a choice that becomes a
// flag or an enum, a value that goes to two places).
template <class V, class Put>
Bind with(Put put) {
  return [put](const Config& c, const std::string& key, RunRecipe& r) { put(r, read<V>(c, key)); };
}

}  // namespace key_binding

// The sections: recipe_keys.cpp has the job's shape (run, data, model,
// train, ckpt, fault), recipe_keys_step.cpp the step's (ddp, amp, comm,
// optim, schedule, mlperf).
std::vector<RecipeKey> runKeys();
std::vector<RecipeKey> dataKeys();
std::vector<RecipeKey> modelKeys();
std::vector<RecipeKey> trainKeys();
std::vector<RecipeKey> ckptKeys();
std::vector<RecipeKey> faultKeys();
std::vector<RecipeKey> ddpKeys();
std::vector<RecipeKey> ampKeys();
std::vector<RecipeKey> commKeys();
std::vector<RecipeKey> optimKeys();
std::vector<RecipeKey> scheduleKeys();
std::vector<RecipeKey> mlperfKeys();

}  // namespace bigbatch::train_detail
