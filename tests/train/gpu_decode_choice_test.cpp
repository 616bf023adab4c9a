// data.decode = "gpu" refused before anything starts where it cannot run
// (validateTrainingConfig, which the launcher and train() call first): data
// that is not a JPEG folder, pad-crop, a build without CUDA or nvJPEG, a run
// on the CPU — each message naming what is missing and the fix. "cpu", the
// default, is never refused for the decode.
#include <gtest/gtest.h>

#include "bigbatch/common/config.h"
#include "bigbatch/common/error.h"
#include "bigbatch/data/gpu_jpeg_decoder.h"
#include "bigbatch/train/config_schema.h"
#include "config_refusal.h"

namespace bigbatch {
namespace {

Config folderRun(const std::string& decode, const std::string& device) {
  Config c = defaultTrainingConfig();
  c.set("data.dataset=folder");
  c.set("data.path=/nonexistent/images");  // not opened by validateTrainingConfig
  c.set("data.decode=" + decode);
  c.set("run.device=" + device);
  return c;
}

using test_config::refusal;

void expectMentions(const std::string& what, std::initializer_list<const char*> needles) {
  ASSERT_FALSE(what.empty()) << "expected a refusal";
  for (const char* n : needles) {
    EXPECT_NE(what.find(n), std::string::npos) << "'" << what << "' lacks '" << n << "'";
  }
}

TEST(GpuDecodeChoice, CpuIsTheDefaultAndIsNotRefused) {
  EXPECT_EQ(defaultTrainingConfig().getString("data.decode"), "cpu");
  EXPECT_EQ(refusal(folderRun("cpu", "cpu")), "");
}

TEST(GpuDecodeChoice, OnlyCpuOrGpu) {
  Config c = defaultTrainingConfig();
  try {
    c.set("data.decode=tpu");
    FAIL() << "data.decode = tpu accepted";
  } catch (const InvalidArgument& e) {
    expectMentions(e.what(), {"data.decode", "cpu, gpu"});
  }
}

TEST(GpuDecodeChoice, RefusedForDataThatIsNotAJpegFolder) {
  Config c = folderRun("gpu", "cpu");
  c.set("data.dataset=fashion-mnist");
  expectMentions(refusal(c), {"data.decode = \"gpu\"", "folder", "data.decode = \"cpu\""});
}

TEST(GpuDecodeChoice, RefusedWithPadCrop) {
  Config c = folderRun("gpu", "cpu");
  c.set("data.pad_crop=4");
  expectMentions(refusal(c), {"data.pad_crop", "data.decode = \"cpu\""});
}

// The build: the CPU build (this test's usual home) names the CUDA build
// and the fix; a CUDA build without nvJPEG names nvJPEG; one with it goes
// on to the device, and refuses run.device = "cpu".
TEST(GpuDecodeChoice, RefusedWhereTheBuildOrTheDeviceCannotDecode) {
  const std::string what = refusal(folderRun("gpu", "cpu"));
  const GpuDecodeSupport support = gpuJpegDecodeSupport();
#ifndef BIGBATCH_WITH_CUDA
  ASSERT_FALSE(support.built);
  expectMentions(
      what, {"data.decode = \"gpu\"", "CPU build", "scripts/build-cuda", "data.decode = \"cpu\""});
#else
  if (support.built) {
    expectMentions(what, {"run.device", "cuda", "data.decode = \"cpu\""});
  } else {
    expectMentions(what, {"nvJPEG", "NVJPEG_ROOT", "data.decode = \"cpu\""});
  }
#endif
}

}  // namespace
}  // namespace bigbatch
