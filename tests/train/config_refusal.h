// The training configuration's refusal, as the choice tests read it: what
// validateTrainingConfig (which the launcher and train() call first) says
// of a config, "" where it takes it. Header-only, for tests/train only.
#pragma once

#include <string>

#include "bigbatch/common/config.h"
#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"

namespace bigbatch::test_config {

inline std::string refusal(const Config& c) {
  try {
    validateTrainingConfig(c);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace bigbatch::test_config
