// The exact allreduce inputs (bigbatch/collectives/exact_inputs.h) under the
// name the collective tests use.
#pragma once

#include "bigbatch/collectives/exact_inputs.h"

namespace bigbatch {
namespace testing = exact;
}  // namespace bigbatch
