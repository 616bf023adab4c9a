// libFuzzer target: arbitrary bytes as an IDX file, plain or gzip, read
// whole and as a prefix. Every input must parse or raise a bigbatch::Error
// naming the problem.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bigbatch/common/error.h"
#include "bigbatch/data/idx_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    (void)bigbatch::parseIdx(bigbatch::gunzipIfNeeded(input, "fuzz"), "fuzz", 0);
  } catch (const bigbatch::Error&) {
  }
  // The prefix a limited load reads: a cap on the output, then the first
  // few items (both derived from the input so the fuzzer can steer them).
  try {
    const size_t cap = 4 + size % 64;
    const int64_t items = 1 + static_cast<int64_t>(size % 5);
    (void)bigbatch::parseIdx(bigbatch::gunzipIfNeeded(input, "fuzz", cap), "fuzz", 0, items);
  } catch (const bigbatch::Error&) {
  }
  return 0;
}
