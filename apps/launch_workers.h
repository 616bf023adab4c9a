// `bigbatch train ... --workers N` on one machine: re-executes the same
// command under `mpirun -np N`, so a user never types mpirun. Each rank then
// takes its rank and size from MPI and cores ÷ N threads.
#pragma once

#include <string>
#include <vector>

namespace bigbatch {

// True when this process should start the workers itself (N > 1 and not
// already started by an MPI launcher).
bool shouldLaunchWorkers(int workers);

// Replaces this process with mpirun running argv (minus --workers) on
// `workers` local ranks. Returns only on failure (throws IoError).
[[noreturn]] void launchWorkers(int workers, int argc, char** argv);

}  // namespace bigbatch
