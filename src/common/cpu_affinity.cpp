#include "bigbatch/common/cpu_affinity.h"

#include <sched.h>

#include <cerrno>
#include <cstring>

#include "bigbatch/common/error.h"

namespace bigbatch {

std::vector<int> allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

void pinProcessTo(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  BIGBATCH_REQUIRE(!cpus.empty() && sched_setaffinity(0, sizeof set, &set) == 0, IoError,
                   "cannot bind this rank to CPUs {}: {}", formatCpuList(cpus),
                   cpus.empty() ? "no CPU given" : std::strerror(errno));
}

std::string formatCpuList(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace bigbatch
