// libFuzzer target: arbitrary bytes as a TOML recipe (and as one --set
// assignment). Every input must end in success or a bigbatch::Error — any
// other exception, a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  bigbatch::Config c = bigbatch::defaultTrainingConfig();
  try {
    c.mergeToml(text, "fuzz.toml");
    bigbatch::validateTrainingConfig(c);
    (void)c.toToml();
  } catch (const bigbatch::Error&) {
  }
  try {
    c.set(text);
  } catch (const bigbatch::Error&) {
  }
  return 0;
}
