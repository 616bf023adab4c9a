// When a process started, as the kernel counts it: with its pid, an
// identity that a later process reusing the pid does not share (how the
// supervisor names itself to its ranks, common/supervision_env.h).
//
// Thread-safe (reads /proc).
#pragma once

#include <string>

namespace bigbatch {

// Field 22 of /proc/PID/stat (clock ticks since boot); "" when there is no
// such process.
std::string processStartTime(long pid);

}  // namespace bigbatch
