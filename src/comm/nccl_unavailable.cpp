// NcclCommunicator in a build without NCCL (the CPU build): it reports
// itself unavailable and refuses to be built, naming the fix. The CUDA
// build links src/comm/nccl/nccl_communicator.cpp instead.
#include "bigbatch/common/error.h"
#include "bigbatch/comm/nccl_communicator.h"

namespace bigbatch {
namespace {

[[noreturn]] void refuse() {
  BIGBATCH_THROW(InvalidArgument,
                 "this bigbatch build has no NCCL: build the CUDA variant (scripts/build-cuda) "
                 "or set ddp.gpu_exchange = \"host\"");
}

}  // namespace

bool NcclCommunicator::available() { return false; }

std::string NcclCommunicator::version() { return "none"; }

NcclCommunicator::Id NcclCommunicator::uniqueId() { refuse(); }

NcclCommunicator::NcclCommunicator(const Id&, int, int, int, int64_t, void*) { refuse(); }

NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::abort() {}
bool NcclCommunicator::inProgress(const char*) { return false; }
void NcclCommunicator::failPast(const char*, Clock::time_point) {}
void NcclCommunicator::awaitState(const char*) {}
void NcclCommunicator::releaseStream() {}
void NcclCommunicator::allreduceSum(void*, size_t, DataType) {}
double NcclCommunicator::synchronize(const char*) { return 0; }

}  // namespace bigbatch
