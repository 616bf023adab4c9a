// The CPUs a process may run on (its affinity mask: what a launcher's
// binding, taskset or a cgroup cpuset leave it), and pinning to some of them.
// A rank's intra-op threads are only as fast as the CPUs it may use: 8
// threads bound to one core run at 1/8 of their speed.
//
// Threading: allowedCpus() from any thread; pinProcessTo() before the
// process starts its threads (it sets the calling thread's mask, which
// threads created afterwards inherit).
#pragma once

#include <string>
#include <vector>

namespace bigbatch {

// The CPU ids this process's calling thread may run on, ascending.
std::vector<int> allowedCpus();
// Restricts the calling thread, and the threads it creates afterwards, to
// `cpus` (IoError naming the CPUs and the system's reason on failure).
void pinProcessTo(const std::vector<int>& cpus);
// "0-3,8" for {0, 1, 2, 3, 8}.
std::string formatCpuList(const std::vector<int>& cpus);

}  // namespace bigbatch
