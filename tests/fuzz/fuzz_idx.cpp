// libFuzzer target: arbitrary bytes as an IDX file, plain or gzip. Every
// input must parse or raise a bigbatch::Error naming the problem.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bigbatch/common/error.h"
#include "bigbatch/data/idx_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const std::string bytes =
        bigbatch::gunzipIfNeeded(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    (void)bigbatch::parseIdx(bytes, "fuzz", 0);
  } catch (const bigbatch::Error&) {
  }
  return 0;
}
