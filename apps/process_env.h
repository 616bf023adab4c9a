// Process-wide settings the binary applies for the user before any work:
// OpenBLAS single-threaded, here and in every process it starts (mpirun's
// ranks, tune's trials). Called first thing in main(), on the main thread.
#pragma once

namespace bigbatch {

// OpenBLAS (pthread build) starts its own thread pool beside libtorch's
// OpenMP pool, and the two would fight for the cores; libtorch parallelises
// above BLAS, so BLAS runs one thread. OPENBLAS_NUM_THREADS=1 goes into the
// environment for children (unless the user set it: then theirs holds
// everywhere); this process's OpenBLAS, which read the environment when it
// loaded, is told through openblas_set_num_threads (looked up at run time:
// another BLAS has no pool, and nothing to set).
void ensureProcessEnvironment();

}  // namespace bigbatch
