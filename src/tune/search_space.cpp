#include "bigbatch/tune/search_space.h"

#include <fmt/format.h>

#include <cmath>
#include <random>
#include <set>

#include "bigbatch/common/error.h"
#include "bigbatch/common/parse_number.h"

namespace bigbatch {
namespace {

double number(const std::string& text, const std::string& whole) {
  const std::optional<double> v = parseWholeDouble(text);
  BIGBATCH_REQUIRE(v.has_value(), InvalidArgument,
                   "tune parameter '{}': '{}' is not a number (ranges are lo:hi, lo:hi:log or "
                   "lo:hi:int; lists are a,b,c)",
                   whole, text);
  return *v;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == sep) {
      out.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// splitmix64: a well-mixed 64-bit seed from (seed, trial).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

SearchParameter parseSearchParameter(const std::string& text) {
  const size_t eq = text.find('=');
  BIGBATCH_REQUIRE(eq != std::string::npos && eq > 0 && eq + 1 < text.size(), InvalidArgument,
                   "tune parameter '{}': expected key=spec, e.g. optim.lr=1:40:log or "
                   "schedule.warmup_epochs=1,2,3",
                   text);
  SearchParameter p;
  p.key = text.substr(0, eq);
  const std::string spec = text.substr(eq + 1);
  if (spec.find(':') == std::string::npos) {
    p.kind = SearchParameter::kChoice;
    // '|' separates choices that hold commas themselves (lists).
    p.choices = split(spec, spec.find('|') != std::string::npos ? '|' : ',');
    std::set<std::string> seen;
    for (const auto& c : p.choices) {
      BIGBATCH_REQUIRE(!c.empty(), InvalidArgument, "tune parameter '{}': an empty choice", text);
      BIGBATCH_REQUIRE(seen.insert(c).second, InvalidArgument,
                       "tune parameter '{}': '{}' is listed twice", text, c);
    }
    return p;
  }
  const std::vector<std::string> parts = split(spec, ':');
  BIGBATCH_REQUIRE(parts.size() == 2 || parts.size() == 3, InvalidArgument,
                   "tune parameter '{}': a range is lo:hi, lo:hi:log or lo:hi:int", text);
  p.lo = number(parts[0], text);
  p.hi = number(parts[1], text);
  BIGBATCH_REQUIRE(p.lo < p.hi, InvalidArgument,
                   "tune parameter '{}': the range needs lo < hi (got {} and {})", text, p.lo,
                   p.hi);
  if (parts.size() == 3) {
    if (parts[2] == "log") {
      p.kind = SearchParameter::kLogUniform;
      BIGBATCH_REQUIRE(p.lo > 0, InvalidArgument,
                       "tune parameter '{}': a log range needs lo > 0 (got {})", text, p.lo);
    } else if (parts[2] == "int") {
      p.kind = SearchParameter::kInteger;
      BIGBATCH_REQUIRE(p.lo == std::floor(p.lo) && p.hi == std::floor(p.hi), InvalidArgument,
                       "tune parameter '{}': an int range needs whole bounds (got {} and {})", text,
                       p.lo, p.hi);
    } else {
      BIGBATCH_THROW(InvalidArgument,
                     "tune parameter '{}': '{}' is not a scale; use log or int (or none: "
                     "uniform)",
                     text, parts[2]);
    }
  }
  return p;
}

SearchSpace::SearchSpace(std::vector<SearchParameter> parameters, uint64_t seed)
    : parameters_(std::move(parameters)), seed_(seed) {
  BIGBATCH_REQUIRE(!parameters_.empty(), InvalidArgument,
                   "tune: no parameter to search; give --param key=spec (or a [tune] table)");
  std::set<std::string> keys;
  for (const auto& p : parameters_) {
    BIGBATCH_REQUIRE(keys.insert(p.key).second, InvalidArgument,
                     "tune: '{}' is given twice; give each key one range or list", p.key);
  }
}

std::vector<std::string> SearchSpace::draw(int64_t trial) const {
  std::mt19937_64 rng(mix(seed_ ^ mix(static_cast<uint64_t>(trial))));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::string> out;
  for (const auto& p : parameters_) {
    const double u = unit(rng);  // one draw per parameter, whatever its kind
    std::string value;
    switch (p.kind) {
      case SearchParameter::kUniform:
        value = fmt::format("{:.6g}", p.lo + u * (p.hi - p.lo));
        break;
      case SearchParameter::kLogUniform:
        value =
            fmt::format("{:.6g}", std::exp(std::log(p.lo) + u * (std::log(p.hi) - std::log(p.lo))));
        break;
      case SearchParameter::kInteger: {
        const auto n = static_cast<int64_t>(p.hi - p.lo) + 1;
        value = std::to_string(static_cast<int64_t>(p.lo) +
                               std::min<int64_t>(n - 1, static_cast<int64_t>(u * n)));
        break;
      }
      case SearchParameter::kChoice: {
        const auto n = static_cast<int64_t>(p.choices.size());
        value =
            p.choices[static_cast<size_t>(std::min<int64_t>(n - 1, static_cast<int64_t>(u * n)))];
        break;
      }
    }
    out.push_back(p.key + "=" + value);
  }
  return out;
}

}  // namespace bigbatch
