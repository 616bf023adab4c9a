#include "bigbatch/common/process_start.h"

#include <fstream>
#include <sstream>

namespace bigbatch {

std::string processStartTime(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return "";
  const size_t close = stat.rfind(')');  // after the command name, which may hold spaces
  if (close == std::string::npos || close + 2 > stat.size()) return "";
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) {  // rest starts at field 3 (the state)
    if (!(rest >> field)) return "";
  }
  return field;
}

}  // namespace bigbatch
