// Comma-separated command-line lists ("auto,shm,mpi"), empty items dropped.
#pragma once

#include <string>
#include <vector>

namespace bigbatch {

inline std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  for (size_t a = 0, b; a <= s.size(); a = b + 1) {
    b = s.find(',', a);
    if (b == std::string::npos) b = s.size();
    if (b > a) out.push_back(s.substr(a, b - a));
  }
  return out;
}

}  // namespace bigbatch
