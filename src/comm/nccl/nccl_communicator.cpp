// The NCCL transport (include/bigbatch/comm/nccl_communicator.h): plain C++
// on the CUDA runtime and NCCL's C API, no torch header — so it compiles in
// the CPU build too (as a check, into a library nothing links).
#include "bigbatch/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

ncclComm_t asComm(void* c) { return static_cast<ncclComm_t>(c); }
cudaStream_t asStream(void* s) { return static_cast<cudaStream_t>(s); }

void checkCuda(cudaError_t e, const char* what) {
  BIGBATCH_REQUIRE(e == cudaSuccess, Error, "CUDA error in {}: {} ({})", what,
                   cudaGetErrorString(e), static_cast<int>(e));
}

ncclDataType_t ncclType(DataType t) {
  switch (t) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat16: return ncclFloat16;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
    case DataType::kBFloat16: return ncclBfloat16;
#endif
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUInt8: return ncclUint8;
    default: break;
  }
  BIGBATCH_THROW(InvalidArgument, "NCCL cannot reduce element type {} in this build",
                 static_cast<int>(t));
}

}  // namespace

bool NcclCommunicator::available() { return true; }

std::string NcclCommunicator::version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // Since 2.9 the code is major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

NcclCommunicator::Id NcclCommunicator::uniqueId() {
  static_assert(sizeof(ncclUniqueId) == kIdBytes, "NCCL_UNIQUE_ID_BYTES changed");
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  BIGBATCH_REQUIRE(r == ncclSuccess, Error, "ncclGetUniqueId failed: {} ({})",
                   ncclGetErrorString(r), ncclGetLastError(nullptr));
  Id out;
  std::memcpy(out.data(), &id, kIdBytes);
  return out;
}

NcclCommunicator::NcclCommunicator(const Id& id, int rank, int size, int device,
                                   int64_t timeoutMs, void* stream)
    : rank_(rank), size_(size), device_(device), timeoutMs_(timeoutMs) {
  BIGBATCH_REQUIRE(size >= 1 && rank >= 0 && rank < size, InvalidArgument,
                   "NCCL rank {} of {} is out of range", rank, size);
  BIGBATCH_REQUIRE(timeoutMs > 0, InvalidArgument, "NCCL deadline {} ms must be positive",
                   timeoutMs);
  int devices = 0;
  checkCuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  BIGBATCH_REQUIRE(device >= 0 && device < devices, InvalidArgument,
                   "NCCL rank {} asks for CUDA device {}, but this host shows {} device(s)", rank,
                   device, devices);
  checkCuda(cudaSetDevice(device), "cudaSetDevice");
  if (stream == nullptr) {
    cudaStream_t own = nullptr;
    checkCuda(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), "cudaStreamCreate");
    stream = own;
    ownStream_ = true;
  }
  stream_ = stream;

  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), kIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait is ours, under a deadline
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, size, uid, rank, &config);
  comm_ = comm;
  if (r != ncclSuccess && r != ncclInProgress) {
    const std::string why = ncclGetErrorString(r);
    abort();
    releaseStream();
    BIGBATCH_THROW(Error,
                   "NCCL set-up failed on rank {} (device {}): {}; if ranks of the job share "
                   "this GPU (NCCL refuses that), give each rank its own GPU or set "
                   "ddp.gpu_exchange = \"host\"",
                   rank, device, why);
  }
  try {
    awaitState("the NCCL communicator set-up");
  } catch (...) {
    releaseStream();
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  // Abort, not destroy: every operation was waited for by now, or the run
  // failed — and abort is the one release that cannot block on a peer.
  abort();
  releaseStream();
}

void NcclCommunicator::releaseStream() {
  if (ownStream_ && stream_ != nullptr) cudaStreamDestroy(asStream(stream_));
  stream_ = nullptr;
}

void NcclCommunicator::abort() {
  if (aborted_ || comm_ == nullptr) return;
  aborted_ = true;
  ncclCommAbort(asComm(comm_));
}

bool NcclCommunicator::inProgress(const char* operation) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t q = ncclCommGetAsyncError(asComm(comm_), &state);
  if (q != ncclSuccess) state = q;
  if (state == ncclSuccess || state == ncclInProgress) return state == ncclInProgress;
  const std::string why =
      fmt::format("{} ({})", ncclGetErrorString(state), ncclGetLastError(asComm(comm_)));
  abort();
  BIGBATCH_THROW(PeerError, "NCCL failed in {} on rank {} (device {}): {}", operation, rank_, device_,
                 why);
}

void NcclCommunicator::failPast(const char* operation, Clock::time_point deadline) {
  if (Clock::now() <= deadline) return;
  abort();
  BIGBATCH_THROW(TimeoutError,
                 "{} did not complete within comm.timeout_s = {:g} s on rank {} (NCCL, {} "
                 "rank(s)); the communicator was aborted",
                 operation, static_cast<double>(timeoutMs_) / 1000.0, rank_, size_);
}

void NcclCommunicator::awaitState(const char* operation) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutMs_);
  while (inProgress(operation)) {
    failPast(operation, deadline);
    std::this_thread::sleep_for(kPoll);
  }
}

void NcclCommunicator::allreduceSum(void* data, size_t count, DataType type) {
  BIGBATCH_REQUIRE(!aborted_, Error,
                   "the NCCL communicator of rank {} was aborted after an earlier failure", rank_);
  if (count == 0) return;
  const ncclResult_t r = ncclAllReduce(data, data, count, ncclType(type), ncclSum,
                                       asComm(comm_), asStream(stream_));
  if (r == ncclInProgress) {
    awaitState("the NCCL allreduce's enqueue");
  } else if (r != ncclSuccess) {
    const std::string why = ncclGetErrorString(r);
    abort();
    BIGBATCH_THROW(Error, "ncclAllReduce of {} elements failed on rank {}: {}", count, rank_,
                   why);
  }
}

double NcclCommunicator::synchronize(const char* operation) {
  BIGBATCH_REQUIRE(!aborted_, Error,
                   "the NCCL communicator of rank {} was aborted after an earlier failure", rank_);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeoutMs_);
  for (;;) {
    const cudaError_t e = cudaStreamQuery(asStream(stream_));
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) {
      abort();
      checkCuda(e, operation);
    }
    inProgress(operation);  // throws on an error NCCL reports (a peer gone)
    failPast(operation, deadline);
    std::this_thread::sleep_for(kPoll);
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace bigbatch
