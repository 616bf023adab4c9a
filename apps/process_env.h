// Process-wide settings that must be in place before libtorch, OpenBLAS or
// the allocator initialise, so they are applied by re-executing the binary
// once with the right environment (no action from the user).
#pragma once

namespace bigbatch {

// May re-exec argv with an adjusted environment; returns when none is needed.
void ensureProcessEnvironment(int argc, char** argv);

}  // namespace bigbatch
