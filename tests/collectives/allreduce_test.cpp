// Every algorithm x world size 1..8 x element count x type, in-process, with
// exact rank-derived inputs compared with ==. A tiny segment size drives the
// ring's multi-segment path, and tiny pieces the hierarchical pipeline,
// without large buffers.
#include <gtest/gtest.h>

#include <mutex>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/common/error.h"
#include "test_inputs.h"

namespace bigbatch {
namespace {

using testing::countWrong;
using testing::makeInput;

struct Case {
  std::string algorithm;
  DataType type;
  int ranksPerHost = 0;  // 0: every rank on one host
};

class AllreduceSweep : public ::testing::TestWithParam<Case> {};

TEST_P(AllreduceSweep, ExactSumsEveryWorldSizeAndCount) {
  const Case c = GetParam();
  for (size_t segmentBytes : {size_t{0}, size_t{256 * 1024}, size_t{12}}) {
    AllreduceOptions o;
    o.segmentBytes = segmentBytes;
    // 12 B -> the smallest chunk, 512 B (128 fp32 or 256 fp16 elements):
    // many chunks per call (0: the transport's segment, the default chunk).
    // The hierarchical pipeline across hosts: its default 4 MiB pieces (no
    // call here is that large: one piece), 1 MiB pieces (4 in the largest
    // call) and 64-byte ones (up to 16 pieces, some blocks empty).
    if (segmentBytes > 0) o.shmChunkBytes = segmentBytes;
    if (segmentBytes == 256 * 1024) o.pipelineBytes = 1 << 20;
    if (segmentBytes == 12) o.pipelineBytes = 64;
    auto algo = makeAllreduce(c.algorithm, o);
    for (int n = 1; n <= 8; ++n) {
      std::vector<size_t> counts = {0, 1, 7, 1000};
      if (segmentBytes == 256 * 1024) counts.push_back((1u << 20) + 3);
      for (size_t count : counts) {
        std::mutex m;
        std::vector<std::string> failures;
        runInProcess(n, [&](Communicator& comm) {
          auto buf = makeInput(c.type, count, comm.rank());
          algo->run(comm, buf.data(), count, c.type);
          std::string first;
          const size_t wrong = countWrong(c.type, buf, count, n, &first);
          if (wrong) {
            std::lock_guard<std::mutex> lock(m);
            failures.push_back("rank " + std::to_string(comm.rank()) + ": " +
                               std::to_string(wrong) + " wrong, first at " + first);
          }
        }, c.ranksPerHost);
        ASSERT_TRUE(failures.empty()) << c.algorithm << " " << dataTypeName(c.type) << " n=" << n
                                      << " count=" << count << " segment=" << segmentBytes << ": "
                                      << failures.front();
      }
    }
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* a : {"ring", "halving_doubling", "recursive_doubling", "shm", "hierarchical",
                        "auto"}) {
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16}) {
      out.push_back({a, t});
    }
  }
  // Hierarchical across simulated hosts: 2 ranks per host (uniform for even
  // n, a short last host for odd n) and 3 per host.
  for (int perHost : {2, 3}) {
    for (DataType t : {DataType::kFloat32, DataType::kFloat16}) out.push_back({"hierarchical", t, perHost});
  }
  out.push_back({"auto", DataType::kFloat32, 2});
  return out;
}

INSTANTIATE_TEST_SUITE_P(InProcess, AllreduceSweep, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name =
                               info.param.algorithm + "_" + dataTypeName(info.param.type);
                           if (info.param.ranksPerHost) {
                             name += "_" + std::to_string(info.param.ranksPerHost) + "PerHost";
                           }
                           return name;
                         });

// The hierarchical allreduce's shared-memory phases (a reduce-scatter, then
// an allgather) share one staging segment and its counters with each other
// and with the shared-memory allreduce: back-to-back calls of different
// counts (some below the ranks per host: empty blocks) and element types,
// with many of the smallest chunks each and no argument check between them
// (as DDP and the torch backend run), must never read a buffer a peer is
// already refilling — in one piece, or pipelined in pieces of 256 bytes
// (each piece's inter-host ring in flight while the next is staged).
TEST(Allreduce, HierarchicalBackToBackCallsStayExact) {
  for (size_t pipelineBytes : {size_t{0}, size_t{256}})
  for (int perHost : {2, 3}) {
    AllreduceOptions o;
    o.shmChunkBytes = 512;  // the smallest chunk
    o.checkSignature = false;
    o.pipelineBytes = pipelineBytes;
    auto algo = makeAllreduce("hierarchical", o);
    std::mutex m;
    std::vector<std::string> failures;
    runInProcess(6, [&](Communicator& comm) {
      for (size_t count : {size_t{1000}, size_t{1}, size_t{4097}, size_t{2}, size_t{64},
                           size_t{2500}}) {
        for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
          auto buf = makeInput(t, count, comm.rank());
          algo->run(comm, buf.data(), count, t);
          std::string first;
          if (countWrong(t, buf, count, 6, &first)) {
            std::lock_guard<std::mutex> lock(m);
            failures.push_back("rank " + std::to_string(comm.rank()) + " count " +
                               std::to_string(count) + " " + dataTypeName(t) +
                               ": first wrong at " + first);
          }
        }
      }
    }, perHost);
    EXPECT_TRUE(failures.empty()) << perHost << " per host, pieces of " << pipelineBytes
                                  << " B: " << failures.front();
  }
}

TEST(Allreduce, SizeMismatchFailsOnEveryRank) {
  for (const char* a : {"ring", "halving_doubling", "recursive_doubling", "shm", "hierarchical"}) {
    auto algo = makeAllreduce(a);
    std::mutex m;
    int mismatches = 0;
    EXPECT_THROW(runInProcess(3,
                              [&](Communicator& comm) {
                                const size_t count = comm.rank() == 1 ? 10 : 12;
                                std::vector<float> buf(count, 1.f);
                                try {
                                  algo->run(comm, buf.data(), count, DataType::kFloat32);
                                } catch (const MismatchError&) {
                                  std::lock_guard<std::mutex> lock(m);
                                  ++mismatches;
                                  throw;
                                }
                              },
                              0, 5000),
                 MismatchError)
        << a;
    EXPECT_EQ(mismatches, 3) << a << ": every rank must see the mismatch";
  }
}

TEST(Allreduce, TypeMismatchFailsOnEveryRank) {
  auto algo = makeAllreduce("ring");
  std::atomic<int> mismatches{0};
  EXPECT_THROW(runInProcess(2,
                            [&](Communicator& comm) {
                              // Same byte count, different types: caught by the signature.
                              std::vector<uint8_t> buf(64);
                              const DataType t = comm.rank() == 0 ? DataType::kFloat32
                                                                  : DataType::kFloat16;
                              try {
                                algo->run(comm, buf.data(), 64 / elementSize(t), t);
                              } catch (const MismatchError& e) {
                                ++mismatches;
                                EXPECT_NE(std::string(e.what()).find("different arguments"),
                                          std::string::npos);
                                throw;
                              }
                            },
                            0, 5000),
               MismatchError);
  EXPECT_EQ(mismatches.load(), 2);
}

TEST(Allreduce, SilentPeerTimesOutNamingIt) {
  auto algo = makeAllreduce("ring");
  std::atomic<int> timeouts{0};
  auto start = std::chrono::steady_clock::now();
  try {
    runInProcess(3,
                 [&](Communicator& comm) {
                   if (comm.rank() == 2) return;  // never joins the collective
                   std::vector<float> buf(100, 1.f);
                   try {
                     algo->run(comm, buf.data(), buf.size(), DataType::kFloat32);
                   } catch (const TimeoutError& e) {
                     ++timeouts;
                     throw;
                   }
                 },
                 0, 300);
    FAIL() << "expected an error";
  } catch (const Error&) {
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(timeouts.load(), 1);
  EXPECT_LT(s, 5.0);
}

// A rank that passes the signature check and then leaves (as a crashed
// process would) must not hang the others: each algorithm times out within
// the deadline and names a rank.
TEST(Allreduce, RankLeavingMidCollectiveTimesOut) {
  for (const char* a : {"ring", "halving_doubling", "shm", "hierarchical"}) {
    auto algo = makeAllreduce(a);
    std::atomic<int> timeouts{0}, namesRank1{0};
    const auto start = std::chrono::steady_clock::now();
    try {
      runInProcess(3,
                   [&](Communicator& comm) {
                     std::vector<float> buf(4096, 1.f);
                     if (comm.rank() == 1) {
                       checkSameSignature(comm, 1, buf.size(), DataType::kFloat32);
                       return;  // gone, mid-collective from the others' view
                     }
                     try {
                       algo->run(comm, buf.data(), buf.size(), DataType::kFloat32);
                     } catch (const TimeoutError& e) {
                       // A rank waiting on a survivor that waits on rank 1
                       // names its own silent neighbour; one names rank 1.
                       namesRank1 += std::string(e.what()).find("rank 1 ") != std::string::npos;
                       ++timeouts;
                       throw;
                     }
                   },
                   0, 400);
      ADD_FAILURE() << a << ": expected an error";
    } catch (const Error&) {
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_GE(timeouts.load(), 1) << a;
    EXPECT_GE(namesRank1.load(), 1) << a;
    EXPECT_LT(s, 5.0) << a;
  }
}

// The same across 2 hosts of 2 ranks with the hierarchical pipeline in 16
// pieces: while the rings of earlier pieces are in flight, rank 1 leaves;
// its host peer's shared-memory wait and its cross-host peer's ring each
// end within the deadline instead of hanging.
TEST(Allreduce, PipelinedHierarchicalRankLeavingTimesOut) {
  AllreduceOptions o;
  o.pipelineBytes = 1024;  // 16 KiB below: 16 pieces
  auto algo = makeAllreduce("hierarchical", o);
  std::atomic<int> timeouts{0}, namesRank1{0};
  const auto start = std::chrono::steady_clock::now();
  try {
    runInProcess(4,
                 [&](Communicator& comm) {
                   std::vector<float> buf(4096, 1.f);
                   if (comm.rank() == 1) {
                     checkSameSignature(comm, 1, buf.size(), DataType::kFloat32);
                     return;
                   }
                   try {
                     algo->run(comm, buf.data(), buf.size(), DataType::kFloat32);
                   } catch (const TimeoutError& e) {
                     namesRank1 += std::string(e.what()).find("rank 1 ") != std::string::npos;
                     ++timeouts;
                     throw;
                   }
                 },
                 2, 400);
    ADD_FAILURE() << "expected an error";
  } catch (const Error&) {
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(timeouts.load(), 1);
  EXPECT_GE(namesRank1.load(), 1);  // rank 0, in the shared-memory wait for its local rank 1
  EXPECT_LT(s, 5.0);
}

TEST(Allreduce, UnknownAlgorithmIsInvalidArgument) {
  EXPECT_THROW(makeAllreduce("tree"), InvalidArgument);
}

TEST(Communicator, SplitByHostAndLocalRank) {
  runInProcess(6, [](Communicator& comm) {
    EXPECT_EQ(comm.localSize(), 3);
    EXPECT_EQ(comm.localRank(), comm.rank() % 3);
    auto host = comm.splitByHost();
    EXPECT_EQ(host->size(), 3);
    EXPECT_EQ(host->rank(), comm.rank() % 3);
    auto peers = comm.splitByLocalRank();
    EXPECT_EQ(peers->size(), 2);
    EXPECT_EQ(peers->rank(), comm.rank() / 3);
    EXPECT_EQ(peers->localSize(), 1);
    peers->barrier();
  }, /*ranksPerHost=*/3);
}

}  // namespace
}  // namespace bigbatch
