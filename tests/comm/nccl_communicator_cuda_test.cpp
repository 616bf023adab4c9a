// NcclCommunicator on a GPU (CUDA build with NCCL, label "cuda"): one rank
// sums in place for every element type, on its own stream or a given one;
// a rank whose peers never come is aborted at the deadline with a
// TimeoutError instead of hanging; a device that does not exist and a use
// after an abort are refused. (NCCL refuses two ranks on one GPU, so a
// machine with one GPU checks the transport on one rank; the DDP's use of
// it is tests/ddp/nccl_exchange_cuda_test.cpp.)
#include "bigbatch/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// `bytes` on the device holding `host`, summed in place by `c`, read back.
std::vector<uint8_t> sumOnDevice(NcclCommunicator& c, const std::vector<uint8_t>& host,
                                 size_t count, DataType type) {
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, host.size()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  c.allreduceSum(d, count, type);
  EXPECT_GE(c.synchronize("a test allreduce"), 0.0);
  std::vector<uint8_t> out(host.size());
  EXPECT_EQ(cudaMemcpy(out.data(), d, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d);
  return out;
}

TEST(NcclCommunicator, OneRankSumsInPlaceForEveryType) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(NcclCommunicator::available());
  NcclCommunicator c(NcclCommunicator::uniqueId(), 0, 1, 0, 20000);
  EXPECT_EQ(c.size(), 1);
  EXPECT_NE(c.stream(), nullptr);
  for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
                     DataType::kFloat64, DataType::kInt64}) {
    const size_t count = 1000003;  // odd: no chunk is whole
    std::vector<uint8_t> host(count * elementSize(t));
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>((i * 131 + 7) % 251);
    if (t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
        t == DataType::kFloat64) {
      // Keep every value finite: clear each element's top exponent bit.
      const size_t e = elementSize(t);
      for (size_t i = e - 1; i < host.size(); i += e) host[i] &= 0x3f;
    }
    // One rank: the sum is the value itself, bit for bit.
    EXPECT_EQ(sumOnDevice(c, host, count, t), host) << dataTypeName(t);
  }
}

TEST(NcclCommunicator, RunsOnTheStreamItIsGiven) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  {
    NcclCommunicator c(NcclCommunicator::uniqueId(), 0, 1, 0, 20000, s);
    EXPECT_EQ(c.stream(), static_cast<void*>(s));
    std::vector<uint8_t> host(4096 * sizeof(float), 0);
    std::memset(host.data(), 0x3c, host.size());
    EXPECT_EQ(sumOnDevice(c, host, 4096, DataType::kFloat32), host);
  }
  // The given stream outlives the communicator (it was not destroyed).
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
}

TEST(NcclCommunicator, ALoneRankIsAbortedAtTheDeadlineInsteadOfHanging) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // Rank 0 of 2: rank 1 never comes.
    NcclCommunicator c(NcclCommunicator::uniqueId(), 0, 2, 0, 1500);
    FAIL() << "a communicator of 2 was set up with one rank";
  } catch (const TimeoutError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("set-up"), std::string::npos) << m;
    EXPECT_NE(m.find("comm.timeout_s = 1.5 s"), std::string::npos) << m;
    EXPECT_NE(m.find("aborted"), std::string::npos) << m;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(s, 1.4);
  EXPECT_LT(s, 30.0);  // the deadline, plus NCCL's abort
}

TEST(NcclCommunicator, ABadDeviceAndUseAfterAbortAreRefused) {
  if (!haveGpu()) GTEST_SKIP() << "no CUDA device";
  EXPECT_THROW(NcclCommunicator(NcclCommunicator::uniqueId(), 0, 1, 4096, 1000),
               InvalidArgument);
  EXPECT_THROW(NcclCommunicator(NcclCommunicator::uniqueId(), 1, 1, 0, 1000), InvalidArgument);
  NcclCommunicator c(NcclCommunicator::uniqueId(), 0, 1, 0, 20000);
  c.abort();
  c.abort();  // idempotent
  EXPECT_TRUE(c.aborted());
  void* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(float)), cudaSuccess);
  EXPECT_THROW(c.allreduceSum(d, 1, DataType::kFloat32), Error);
  EXPECT_THROW(c.synchronize("after abort"), Error);
  cudaFree(d);
}

}  // namespace
}  // namespace bigbatch
