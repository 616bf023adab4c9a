// fault.kind at fault.step on fault.rank: the failures docs/RELIABILITY.md
// measures (throw, abort, sigkill, hang; "nan" and "nan_input" return and the
// trainer makes this rank's loss, or its batch, NaN). Prints "bigbatch:
// injecting fault ..." to stderr
// first. Internal to src/train; called from the trainer thread.
#pragma once

#include <cstdint>
#include <string>

namespace bigbatch::train_detail {

void injectFault(const std::string& kind, int rank, int64_t step);

}  // namespace bigbatch::train_detail
