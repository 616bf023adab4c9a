// ddp.gpu_exchange: the choice between NCCL and the host-staged exchange,
// and its refusals — all decided without a GPU (the choice is a function
// of the setting, the device, the ranks per GPU and the build), so the CPU
// build tests it; tests/comm/nccl_communicator_cuda_test.cpp runs NCCL.
#include "step/gpu_exchange.h"

#include <gtest/gtest.h>

#include "bigbatch/common/config.h"
#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"

namespace bigbatch::train_detail {
namespace {

RunDevice onGpu(int ranksPerGpu) {
  RunDevice d;
  d.device = torch::Device(torch::kCUDA, 0);
  d.gpusOnHost = 1;
  d.ranksPerGpu = ranksPerGpu;
  return d;
}

std::string refusal(const std::string& setting, int ranksPerGpu, bool ncclBuilt) {
  try {
    resolveGpuExchange(setting, onGpu(ranksPerGpu), 2, ranksPerGpu, ncclBuilt);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(GpuExchange, AutoTakesNcclWhereverItCanRun) {
  EXPECT_EQ(resolveGpuExchange("auto", onGpu(1), 2, 1, true), GpuExchange::kNccl);
  EXPECT_EQ(resolveGpuExchange("auto", onGpu(1), 16, 1, true), GpuExchange::kNccl);
  // Two ranks on one GPU somewhere (NCCL refuses that), or no NCCL: host.
  EXPECT_EQ(resolveGpuExchange("auto", onGpu(1), 2, 2, true), GpuExchange::kHost);
  EXPECT_EQ(resolveGpuExchange("auto", onGpu(1), 2, 1, false), GpuExchange::kHost);
  EXPECT_EQ(resolveGpuExchange("host", onGpu(1), 2, 1, true), GpuExchange::kHost);
  EXPECT_EQ(resolveGpuExchange("nccl", onGpu(1), 4, 1, true), GpuExchange::kNccl);
}

// ddp.partition = optimizer keeps its slices and their optimizer in host
// memory: its reduce-scatter runs on the host mirrors, whatever NCCL could do.
TEST(GpuExchange, APartitionedOptimizerTakesTheHostPathAndRefusesNccl) {
  EXPECT_EQ(resolveGpuExchange("auto", onGpu(1), 2, 1, true, /*partitioned=*/true),
            GpuExchange::kHost);
  EXPECT_EQ(resolveGpuExchange("host", onGpu(1), 2, 1, true, true), GpuExchange::kHost);
  try {
    resolveGpuExchange("nccl", onGpu(1), 2, 1, true, true);
    FAIL() << "ddp.gpu_exchange = nccl accepted with ddp.partition = optimizer";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ddp.partition = optimizer"), std::string::npos) << m;
    EXPECT_NE(m.find("set ddp.gpu_exchange = \"host\""), std::string::npos) << m;
  }
  EXPECT_NO_THROW(checkPartitionedExchange("auto"));
  EXPECT_THROW(checkPartitionedExchange("nccl"), InvalidArgument);
}

TEST(GpuExchange, NothingToChooseOnTheCpuOrOnOneRank) {
  RunDevice cpu;
  for (const char* s : {"auto", "host", "nccl"}) {
    EXPECT_EQ(resolveGpuExchange(s, cpu, 4, 1, true), GpuExchange::kNone) << s;
    EXPECT_EQ(resolveGpuExchange(s, onGpu(1), 1, 1, false), GpuExchange::kNone) << s;
  }
}

TEST(GpuExchange, NcclWhereItCannotRunIsRefusedNamingTheFix) {
  const std::string shared = refusal("nccl", 2, true);
  EXPECT_NE(shared.find("2 ranks share a GPU"), std::string::npos) << shared;
  EXPECT_NE(shared.find("ddp.gpu_exchange = \"host\""), std::string::npos) << shared;
  const std::string unbuilt = refusal("nccl", 1, false);
  EXPECT_NE(unbuilt.find("built without NCCL"), std::string::npos) << unbuilt;
  EXPECT_NE(unbuilt.find("scripts/build-cuda"), std::string::npos) << unbuilt;
  const std::string unknown = refusal("gloo", 1, true);
  EXPECT_NE(unknown.find("\"gloo\" is not an exchange"), std::string::npos) << unknown;
}

TEST(GpuExchange, TheConfigCheckRefusesNcclOffTheGpuBeforeAnyWork) {
  Config c = defaultTrainingConfig();
  c.set("ddp.gpu_exchange=nccl");
  try {
    validateTrainingConfig(c);
    FAIL() << "ddp.gpu_exchange = nccl accepted with run.device = cpu";
  } catch (const InvalidArgument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("run.device = \"cpu\""), std::string::npos) << m;
    EXPECT_NE(m.find("set run.device = \"cuda\""), std::string::npos) << m;
  }
  c.set("ddp.gpu_exchange=host");
  EXPECT_NO_THROW(validateTrainingConfig(c));
}

TEST(GpuExchange, TheBuildSaysWhetherItHasNccl) {
#ifdef BIGBATCH_WITH_CUDA
  if (NcclCommunicator::available()) {
    EXPECT_NO_THROW(checkNcclBuilt());
    EXPECT_NE(NcclCommunicator::version(), "none");
    return;
  }
#endif
  EXPECT_FALSE(NcclCommunicator::available());
  EXPECT_EQ(NcclCommunicator::version(), "none");
  try {
    checkNcclBuilt();
    FAIL() << "a build without NCCL accepted ddp.gpu_exchange = nccl";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("scripts/build-cuda"), std::string::npos) << e.what();
  }
  EXPECT_THROW(NcclCommunicator(NcclCommunicator::Id{}, 0, 1, 0, 1000), InvalidArgument);
}

}  // namespace
}  // namespace bigbatch::train_detail
