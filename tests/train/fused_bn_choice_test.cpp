// model.fused_bn = "on" refused before anything starts where nothing can
// fuse (validateTrainingConfig): a precision other than fp16 or NCHW
// tensors (cuDNN fuses half NHWC only) on every build; then a build without
// the cuDNN kernels names the CUDA build, a CUDA build names run.device.
// "auto" (the default) and "off" are never refused, whatever the device:
// "auto" fuses only where it can (an fp16 channels-last ResNet-50 on a GPU
// of the CUDA build).
#include <gtest/gtest.h>

#include "bigbatch/common/config.h"
#include "bigbatch/common/error.h"
#include "bigbatch/models/fused_batch_norm.h"
#include "bigbatch/train/config_schema.h"
#include "config_refusal.h"

namespace bigbatch {
namespace {

using test_config::refusal;

TEST(FusedBnChoice, AutoAndOffAreNeverRefused) {
  EXPECT_EQ(defaultTrainingConfig().getString("model.fused_bn"), "auto");
  for (const char* choice : {"auto", "off"}) {
    Config c = defaultTrainingConfig();
    c.set(std::string("model.fused_bn=") + choice);
    c.set("model.name=resnet50");
    EXPECT_EQ(refusal(c), "") << choice;
  }
}

TEST(FusedBnChoice, OnIsRefusedWhereNothingCanFuseNamingWhy) {
  Config c = defaultTrainingConfig();
  c.set("model.fused_bn=on");
  c.set("amp.precision=fp16");
  c.set("run.device=cpu");
  const std::string what = refusal(c);
  ASSERT_FALSE(what.empty()) << "model.fused_bn = on accepted on the CPU";
  EXPECT_NE(what.find("model.fused_bn = \"on\""), std::string::npos) << what;
  if (fusedBatchNormAvailable()) {
    EXPECT_NE(what.find("run.device"), std::string::npos) << what;
  } else {
    EXPECT_NE(what.find("CUDA build"), std::string::npos) << what;
  }
}

TEST(FusedBnChoice, OnIsRefusedForAnotherPrecisionOrNchwOnEveryBuild) {
  for (const char* precision : {"bf16", "fp32"}) {
    Config c = defaultTrainingConfig();
    c.set("model.fused_bn=on");
    c.set(std::string("amp.precision=") + precision);
    const std::string what = refusal(c);
    EXPECT_NE(what.find("model.fused_bn = \"on\" needs amp.precision = \"fp16\""),
              std::string::npos)
        << precision << ": " << what;
    EXPECT_NE(what.find(std::string("amp.precision = \"") + precision + "\""), std::string::npos)
        << what;
  }
  Config c = defaultTrainingConfig();
  c.set("model.fused_bn=on");
  c.set("amp.precision=fp16");
  c.set("model.channels_last=false");
  const std::string what = refusal(c);
  EXPECT_NE(what.find("needs model.channels_last = true"), std::string::npos) << what;
}

TEST(FusedBnChoice, OnlyAutoOnOrOff) {
  Config c = defaultTrainingConfig();
  EXPECT_THROW(c.set("model.fused_bn=yes"), InvalidArgument);
}

}  // namespace
}  // namespace bigbatch
