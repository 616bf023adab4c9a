// A whole string read as a number, for options and list items: std::stod
// and std::stoi accept a prefix ("12abc" reads as 12) and throw on junk;
// these take all of the text or nothing, so that each caller can refuse
// the item with its own message naming it.
//
// Threading: pure functions.
#pragma once

#include <cmath>
#include <exception>
#include <optional>
#include <string>

namespace bigbatch {

// A finite number that is the whole of `text`; nullopt otherwise.
inline std::optional<double> parseWholeDouble(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size() || text.empty() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// An integer that is the whole of `text`; nullopt otherwise.
inline std::optional<long long> parseWholeInteger(const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size() || text.empty()) return std::nullopt;
  return v;
}

}  // namespace bigbatch
