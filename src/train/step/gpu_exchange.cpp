#include "step/gpu_exchange.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/collectives/collectives.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/torch_compat.h"

namespace bigbatch::train_detail {
namespace {

void requireNccl(bool built) {
  BIGBATCH_REQUIRE(built, InvalidArgument,
                   "ddp.gpu_exchange = \"nccl\", but this bigbatch was built without NCCL{}; "
                   "build the CUDA variant where NCCL is found (scripts/build-cuda, NCCL_ROOT; "
                   "docs/GPU.md), or set ddp.gpu_exchange = \"host\"",
                   builtWithCuda() ? "" : " (the CPU build)");
}

}  // namespace

void checkNcclBuilt() { requireNccl(NcclCommunicator::available()); }

void checkPartitionedExchange(const std::string& setting) {
  BIGBATCH_REQUIRE(setting != "nccl", InvalidArgument,
                   "ddp.gpu_exchange = \"nccl\" with ddp.partition = optimizer: the partitioned "
                   "optimizer's slices live in host memory and are reduce-scattered there; set "
                   "ddp.gpu_exchange = \"host\" (or \"auto\"), or ddp.partition = none");
}

GpuExchange resolveGpuExchange(const std::string& setting, const RunDevice& device, int worldSize,
                               int maxRanksPerGpu, bool ncclBuilt, bool partitioned) {
  BIGBATCH_REQUIRE(setting == "auto" || setting == "nccl" || setting == "host", InvalidArgument,
                   "ddp.gpu_exchange = \"{}\" is not an exchange; use \"auto\", \"nccl\" or "
                   "\"host\"",
                   setting);
  if (!device.device.is_cuda() || worldSize <= 1) return GpuExchange::kNone;
  if (setting == "host") return GpuExchange::kHost;
  if (partitioned) {
    checkPartitionedExchange(setting);
    return GpuExchange::kHost;
  }
  if (setting == "auto") {
    return ncclBuilt && maxRanksPerGpu <= 1 ? GpuExchange::kNccl : GpuExchange::kHost;
  }
  requireNccl(ncclBuilt);
  BIGBATCH_REQUIRE(maxRanksPerGpu <= 1, InvalidArgument,
                   "ddp.gpu_exchange = \"nccl\", but {} ranks share a GPU on some host, and "
                   "NCCL refuses two ranks of one job on one device: start at most as many ranks "
                   "per host as it has GPUs, or set ddp.gpu_exchange = \"host\" (or \"auto\")",
                   maxRanksPerGpu);
  return GpuExchange::kNccl;
}

std::unique_ptr<NcclLink> connectGpuExchange(Communicator& comm, const RunDevice& device,
                                             const std::string& setting, double timeoutS,
                                             bool partitioned) {
  // run.device is the same on every rank: CPU runs and single ranks have
  // nothing to choose and skip the collective below.
  if (!device.device.is_cuda() || comm.size() <= 1) return nullptr;
  constexpr int kRanksPerGpuTag = 0x7e40;
  int64_t maxRanksPerGpu = device.ranksPerGpu;
  allreduceMaxInt64(comm, &maxRanksPerGpu, 1, kRanksPerGpuTag);
  const GpuExchange choice =
      resolveGpuExchange(setting, device, comm.size(), static_cast<int>(maxRanksPerGpu),
                         NcclCommunicator::available(), partitioned);
  if (choice != GpuExchange::kNccl) return nullptr;
  const c10::impl::VirtualGuardImpl impl(device.device.type());
  auto link = std::make_unique<NcclLink>(impl.getStreamFromGlobalPool(device.device));
  NcclCommunicator::Id id{};
  if (comm.rank() == 0) id = NcclCommunicator::uniqueId();
  broadcast(comm, id.data(), id.size(), 0);
  link->comm = std::make_unique<NcclCommunicator>(
      id, comm.rank(), comm.size(), device.device.index(),
      static_cast<int64_t>(timeoutS * 1000.0), compat::nativeHandle(link->stream));
  return link;
}

}  // namespace bigbatch::train_detail
