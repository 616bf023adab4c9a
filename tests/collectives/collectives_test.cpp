// Broadcast, allgather and reduce-scatter in-process over world sizes 1..8
// with exact values; the allreduce selection table's parser and dispatch;
// the in-process transport's polled requests.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "bigbatch/collectives/allreduce_selector.h"
#include "bigbatch/collectives/collectives.h"
#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/common/error.h"
#include "test_inputs.h"

namespace bigbatch {
namespace {

// The in-process transport's Request::test and receive from any source
// (the torch.distributed backend's send and recv are built on them).
TEST(InProcessRequests, PolledAndReceivedFromAnySource) {
  runInProcess(3, [&](Communicator& comm) {
    if (comm.rank() == 0) {
      int pendingValue = 0;
      auto pending = comm.irecv(&pendingValue, sizeof(int), 2, 9);
      EXPECT_FALSE(pending->test());  // nothing sent on tag 9 yet
      std::set<int> from;
      for (int i = 0; i < 2; ++i) {
        int value = -1;
        auto r = comm.irecvAny(&value, sizeof(value), 8);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!r->test()) {
          ASSERT_LT(std::chrono::steady_clock::now(), until) << "test() never said done";
        }
        from.insert(r->source());
        EXPECT_EQ(value, 10 * r->source());
      }
      EXPECT_EQ(from, (std::set<int>{1, 2}));
      comm.barrier();
      pending->wait();
      EXPECT_EQ(pendingValue, 99);
    } else {
      const int value = 10 * comm.rank();
      comm.send(&value, sizeof(value), 0, 8);
      comm.barrier();
      if (comm.rank() == 2) {
        const int late = 99;
        comm.send(&late, sizeof(late), 0, 9);
      }
    }
  });
}

TEST(Broadcast, EveryRootEveryWorldSize) {
  for (int n = 1; n <= 8; ++n) {
    for (int root = 0; root < n; ++root) {
      for (size_t bytes : {size_t{0}, size_t{1}, size_t{1001}}) {
        std::atomic<int> wrong{0};
        runInProcess(n, [&](Communicator& comm) {
          std::vector<uint8_t> buf(bytes, static_cast<uint8_t>(comm.rank() == root ? 0 : 0xee));
          if (comm.rank() == root) {
            for (size_t i = 0; i < bytes; ++i) buf[i] = static_cast<uint8_t>(i * 7 + root);
          }
          broadcast(comm, buf.data(), bytes, root);
          for (size_t i = 0; i < bytes; ++i) {
            if (buf[i] != static_cast<uint8_t>(i * 7 + root)) ++wrong;
          }
        });
        ASSERT_EQ(wrong.load(), 0) << "n=" << n << " root=" << root << " bytes=" << bytes;
      }
    }
  }
}

TEST(Broadcast, RanksDisagreeingOnRootFailEverywhere) {
  std::atomic<int> mismatches{0};
  EXPECT_THROW(runInProcess(3,
                            [&](Communicator& comm) {
                              std::vector<uint8_t> buf(16);
                              try {
                                broadcast(comm, buf.data(), buf.size(), comm.rank() == 2 ? 1 : 0);
                              } catch (const MismatchError&) {
                                ++mismatches;
                                throw;
                              }
                            },
                            0, 5000),
               MismatchError);
  EXPECT_EQ(mismatches.load(), 3);
}

TEST(AllgatherReduceScatter, ExactChunksEveryWorldSize) {
  for (int n = 1; n <= 8; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{(1u << 18) + 3}}) {
      for (DataType t : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16}) {
        std::mutex m;
        std::vector<std::string> failures;
        runInProcess(n, [&](Communicator& comm) {
          const int r = comm.rank();
          // Reduce-scatter: rank r's own chunk must hold the exact sum.
          auto buf = testing::makeInput(t, count, r);
          reduceScatter(comm, buf.data(), count, t);
          const size_t lo = chunkBegin(count, n, r), hi = chunkBegin(count, n, r + 1);
          size_t wrong = 0;
          for (size_t i = lo; i < hi; ++i) {
            wrong += testing::readValue(t, buf, i) != testing::expectedSum(i, n);
          }
          // Allgather of the summed chunks completes the allreduce.
          allgather(comm, buf.data(), count, t);
          wrong += testing::countWrong(t, buf, count, n, nullptr);
          if (wrong) {
            std::lock_guard<std::mutex> lock(m);
            failures.push_back("rank " + std::to_string(r) + ": " + std::to_string(wrong) + " wrong");
          }
        });
        ASSERT_TRUE(failures.empty()) << "n=" << n << " count=" << count << " "
                                      << dataTypeName(t) << ": " << failures.front();
      }
    }
  }
}

TEST(AllreduceSelector, ParsesAndFormatsRules) {
  auto rules = parseAllreduceRules("64K:recursive_doubling,4M:halving_doubling,shm");
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].belowBytes, 65536u);
  EXPECT_EQ(rules[0].algorithm, "recursive_doubling");
  EXPECT_EQ(rules[1].belowBytes, 4u << 20);
  EXPECT_EQ(rules[2].belowBytes, SIZE_MAX);
  EXPECT_EQ(formatAllreduceRules(rules), "64K:recursive_doubling,4M:halving_doubling,shm");
  EXPECT_EQ(parseAllreduceRules("ring").size(), 1u);
}

TEST(AllreduceSelector, RejectsBadTables) {
  EXPECT_THROW(parseAllreduceRules("64K:tree,ring"), InvalidArgument);
  EXPECT_THROW(parseAllreduceRules("64K:ring"), InvalidArgument);      // no catch-all
  EXPECT_THROW(parseAllreduceRules("4M:ring,64K:shm,mpi"), InvalidArgument);  // not increasing
  EXPECT_THROW(parseAllreduceRules("lots:ring,shm"), InvalidArgument);
  try {
    parseAllreduceRules("64K:tree,ring");
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'tree'"), std::string::npos) << e.what();
  }
}

TEST(AllreduceSelector, DispatchesBySizeAndTopology) {
  AllreduceTable table;
  table.singleHost = parseAllreduceRules("1K:recursive_doubling,ring");
  table.multiHost = parseAllreduceRules("hierarchical");
  runInProcess(4, [&](Communicator& comm) {
    AutoAllreduce a(AllreduceOptions{}, table);
    EXPECT_EQ(a.choose(comm, 100), "recursive_doubling");
    EXPECT_EQ(a.choose(comm, 1024), "ring");
    auto buf = testing::makeInput(DataType::kFloat32, 300, comm.rank());
    a.run(comm, buf.data(), 300, DataType::kFloat32);
    EXPECT_EQ(testing::countWrong(DataType::kFloat32, buf, 300, 4, nullptr), 0u);
  });
  runInProcess(4, [&](Communicator& comm) {
    AutoAllreduce a(AllreduceOptions{}, table);
    EXPECT_EQ(a.choose(comm, 100), "hierarchical");
  }, /*ranksPerHost=*/2);
}

}  // namespace
}  // namespace bigbatch

namespace bigbatch {
namespace {

// Online tuning: the first 2 x (1 + tuneTrials) calls of a size class
// alternate shm and ring; then every rank keeps the same winner, and every
// call's sum is exact throughout.
TEST(AllreduceSelector, OnlineTuningAgreesAcrossRanksAndStaysExact) {
  AllreduceOptions o;
  o.tuneTrials = 2;
  AutoAllreduce a(o, defaultAllreduceTable());
  std::mutex m;
  std::set<std::string> winners;
  runInProcess(3, [&](Communicator& comm) {
    const size_t count = 5000;
    for (int call = 0; call < 8; ++call) {
      if (call == 6) {
        std::lock_guard<std::mutex> lock(m);
        winners.insert(a.tunedChoice(comm, count * 4));
      } else if (call < 6) {
        EXPECT_EQ(a.tunedChoice(comm, count * 4), "");  // still measuring
      }
      auto buf = testing::makeInput(DataType::kFloat32, count, comm.rank());
      a.run(comm, buf.data(), count, DataType::kFloat32);
      EXPECT_EQ(testing::countWrong(DataType::kFloat32, buf, count, 3, nullptr), 0u) << call;
    }
  });
  ASSERT_EQ(winners.size(), 1u);  // one decision, shared by all ranks
  EXPECT_TRUE(*winners.begin() == "shm" || *winners.begin() == "ring") << *winners.begin();
}

// A rank that reaches every call 20 ms late (rank imbalance in a training
// step) must not be timed as the algorithms' cost: without the barrier
// before each timed call, rank 0 would time its 20 ms wait on every
// candidate and the agreed (slowest rank's) times would all exceed 20 ms.
TEST(AllreduceSelector, OnlineTuningDoesNotTimeALateRank) {
  AllreduceOptions o;
  o.tuneTrials = 3;
  // As the DDP engine calls it: without the per-call signature handshake,
  // which would itself line the ranks up before the timed part.
  o.checkSignature = false;
  const size_t count = 5000;
  std::mutex m;
  std::vector<double> seconds;
  runInProcess(2, [&](Communicator& comm) {
    AutoAllreduce a(o, defaultAllreduceTable());  // one per rank, as in separate processes
    for (int call = 0; call < 2 * (1 + o.tuneTrials); ++call) {
      if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      auto buf = testing::makeInput(DataType::kFloat32, count, comm.rank());
      a.run(comm, buf.data(), count, DataType::kFloat32);
      EXPECT_EQ(testing::countWrong(DataType::kFloat32, buf, count, 2, nullptr), 0u) << call;
    }
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(m);
      seconds = a.tunedSeconds(comm, count * 4);
    }
  });
  ASSERT_EQ(seconds.size(), 2u);  // the table's choice and the ring
  for (double s : seconds) {
    EXPECT_GT(s, 0.0);
    // A 20 KB in-process allreduce takes microseconds; 10 ms leaves room for
    // a loaded machine while staying far below the 20 ms lateness.
    EXPECT_LT(s, 0.010) << "the late rank's 20 ms was timed as the algorithm's cost";
  }
}

}  // namespace
}  // namespace bigbatch
