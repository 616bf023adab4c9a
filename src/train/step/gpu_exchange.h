// GPU gradient exchange: how the ranks of a run on GPUs sum their gradients
// (ddp.gpu_exchange), and the NCCL link — the job's NcclCommunicator and
// the torch stream it runs on — built at set-up when that is NCCL.
//
// Internal to src/train; connectGpuExchange() is collective over the job's
// ranks and runs on the training thread, before the exchange is built.
#pragma once

#include <c10/core/Stream.h>

#include <memory>
#include <string>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/comm/nccl_communicator.h"
#include "run/run_device.h"

namespace bigbatch::train_detail {

enum class GpuExchange { kNone, kHost, kNccl };  // kNone: on the CPU, or one rank

// Throws InvalidArgument naming the fix when this build has no NCCL.
void checkNcclBuilt();
// Throws InvalidArgument naming the fix when `setting` is "nccl" under
// ddp.partition = optimizer (its slices are reduce-scattered on the host).
void checkPartitionedExchange(const std::string& setting);

// ddp.gpu_exchange ("auto", "nccl", "host") for a run on `device` with
// `worldSize` ranks, where `maxRanksPerGpu` is the most ranks sharing one
// GPU on any host (NCCL refuses two ranks on one device) and `ncclBuilt`
// whether the build has NCCL. "auto" takes NCCL wherever it can run, else
// the host-staged path; "nccl" where it cannot is refused naming why.
// `partitioned` (ddp.partition = optimizer): the slices and their optimizer
// live in host memory, so the exchange is the host-staged one ("nccl" is
// refused).
GpuExchange resolveGpuExchange(const std::string& setting, const RunDevice& device, int worldSize,
                               int maxRanksPerGpu, bool ncclBuilt, bool partitioned = false);

struct NcclLink {
  explicit NcclLink(c10::Stream s) : stream(s) {}
  c10::Stream stream;                      // a libtorch pool stream of this rank's GPU
  std::unique_ptr<NcclCommunicator> comm;  // runs on stream's native handle
};

// Collective: resolves `setting` with the most ranks per GPU over all ranks
// and, for NCCL, draws the unique id on rank 0, broadcasts it over `comm`
// and builds the communicator (under the deadline `timeoutS`). Null when
// the exchange is not NCCL.
std::unique_ptr<NcclLink> connectGpuExchange(Communicator& comm, const RunDevice& device,
                                             const std::string& setting, double timeoutS,
                                             bool partitioned);

}  // namespace bigbatch::train_detail
