// The search space of `bigbatch tune`: config keys given as ranges or lists,
// and the deterministic draw of one trial's values from it.
//
// Syntax of one parameter (the command line's `--param`, or a line of a
// `[tune]` table):
//   key=lo:hi        uniform in [lo, hi]
//   key=lo:hi:log    log-uniform in [lo, hi] (lo > 0) — learning rates, decays
//   key=lo:hi:int    a whole number, uniform over lo..hi
//   key=a,b,c        one of the listed values (any text: numbers, words)
//   key=a|b|c        the same, for values that hold commas: [16,32,64]|[32,64,128]
// A trial's values are `--set key=value` assignments; trial t of a search
// with seed s draws from its own generator seeded by (s, t), so a resumed
// search redraws exactly the values a trial had, whatever ran before it.
//
// Threading: immutable after parsing; draw() is const and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bigbatch {

struct SearchParameter {
  enum Kind { kUniform, kLogUniform, kInteger, kChoice };
  std::string key;
  Kind kind = kUniform;
  double lo = 0, hi = 0;             // ranges
  std::vector<std::string> choices;  // kChoice
};

// Parses "key=spec"; InvalidArgument naming the parameter and the fix.
SearchParameter parseSearchParameter(const std::string& text);

class SearchSpace {
 public:
  explicit SearchSpace(std::vector<SearchParameter> parameters, uint64_t seed = 1);

  const std::vector<SearchParameter>& parameters() const { return parameters_; }
  // Trial `trial`'s assignments, "key=value", in parameter order. Floats are
  // printed with 6 significant digits (as the value a recipe would state).
  std::vector<std::string> draw(int64_t trial) const;

 private:
  std::vector<SearchParameter> parameters_;
  uint64_t seed_;
};

}  // namespace bigbatch
