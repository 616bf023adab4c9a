// The store-bootstrapped transports (GlooCommunicator, UcxCommunicator),
// each rank a thread of this process, an in-memory store between them: the
// Communicator contract (sizes, tags, polled requests, splits, shared
// memory) and bigbatch's allreduce algorithms on top, exact. Every case
// runs on both transports; how they fail is store_communicator_failure_test.
#include "bigbatch/comm/gloo_communicator.h"
#include "bigbatch/comm/ucx_communicator.h"
#include "bigbatch/comm/world.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/collectives/exact_inputs.h"
#include "bigbatch/common/error.h"
#include "store_transports.h"

namespace bigbatch {
namespace {

using namespace store_transports;

TEST_P(StoreCommunicator, RingOfMessagesOfEverySize) {
  expectNoErrors(runRanks(3, [](Communicator& comm) {
    EXPECT_EQ(comm.size(), 3);
    EXPECT_EQ(comm.transportName(), GetParam().name == "gloo" ? "Gloo TCP" : "UCX");
    const int next = (comm.rank() + 1) % 3, prev = (comm.rank() + 2) % 3;
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, size_t{8 << 20}}) {
      std::vector<uint8_t> out(bytes), in(bytes, 0);
      for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 7 + comm.rank());
      comm.sendrecv(out.data(), bytes, next, in.data(), bytes, prev, 5);
      for (size_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(in[i], static_cast<uint8_t>(i * 7 + prev)) << "byte " << i << " of " << bytes;
      }
    }
  }));
}

TEST_P(StoreCommunicator, TagsKeepMessagesApart) {
  expectNoErrors(runRanks(2, [](Communicator& comm) {
    if (comm.rank() == 0) {
      int a = 1, b = 2;
      auto ra = comm.isend(&a, sizeof(a), 1, 10);
      auto rb = comm.isend(&b, sizeof(b), 1, 11);
      ra->wait();
      rb->wait();
    } else {
      int a = 0, b = 0;
      comm.recv(&b, sizeof(b), 0, 11);  // posted in the other order
      comm.recv(&a, sizeof(a), 0, 10);
      EXPECT_EQ(a, 1);
      EXPECT_EQ(b, 2);
    }
  }));
}

// Request::test never blocks and says when an operation is done; a receive
// from any source names its sender. Gloo's transport has neither: refused.
TEST_P(StoreCommunicator, RequestsPolledAndReceivedFromAnySource) {
  expectNoErrors(runRanks(3, [](Communicator& comm) {
    if (GetParam().name == "gloo") {
      EXPECT_FALSE(comm.pollsRequests());
      int x = 0;
      EXPECT_THROW(comm.irecvAny(&x, sizeof(x), 3), InvalidArgument);
      return;
    }
    ASSERT_TRUE(comm.pollsRequests());
    if (comm.rank() == 0) {
      std::vector<int> from;
      for (int i = 0; i < 2; ++i) {
        int value = -1;
        auto r = comm.irecvAny(&value, sizeof(value), 3);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!r->test()) {
          ASSERT_LT(std::chrono::steady_clock::now(), until) << "test() never said done";
        }
        EXPECT_TRUE(r->test());  // and stays done
        from.push_back(r->source());
        EXPECT_EQ(value, 100 + r->source());
      }
      std::sort(from.begin(), from.end());
      EXPECT_EQ(from, (std::vector<int>{1, 2}));
      // Nothing sent on tag 4: a test says not yet, without waiting.
      int none = 0;
      auto pending = comm.irecv(&none, sizeof(none), 1, 4);
      EXPECT_FALSE(pending->test());
      comm.barrier();
      pending->wait();  // rank 1 sends it after the barrier
      EXPECT_EQ(none, 7);
    } else {
      const int value = 100 + comm.rank();
      comm.send(&value, sizeof(value), 0, 3);
      comm.barrier();
      if (comm.rank() == 1) {
        const int seven = 7;
        comm.send(&seven, sizeof(seven), 0, 4);
      }
    }
  }));
}

TEST_P(StoreCommunicator, HostsAndLocalRanksFromHostNames) {
  expectNoErrors(runRanks(4, [](Communicator& comm) {
    EXPECT_EQ(comm.localSize(), 2);
    EXPECT_EQ(comm.localRank(), comm.rank() % 2);
    EXPECT_EQ(comm.hostComm().size(), 2);
    EXPECT_EQ(comm.crossHostComm().size(), 2);
    EXPECT_TRUE(comm.uniformHosts());
  }, /*ranksPerHost=*/2));
}

struct AlgorithmCase {
  const char* name;
  int ranks, ranksPerHost;
};

TEST_P(StoreCommunicator, EveryAllreduceAlgorithmSumsExactly) {
  for (const AlgorithmCase c : {AlgorithmCase{"ring", 3, 0}, {"halving_doubling", 4, 2},
                                {"recursive_doubling", 3, 0}, {"shm", 3, 0},
                                {"hierarchical", 4, 2}, {"auto", 4, 2}}) {
    auto algo = makeAllreduce(c.name);
    for (DataType type : {DataType::kFloat32, DataType::kFloat16}) {
      for (size_t count : {size_t{1}, size_t{1000}, size_t{(1u << 20) + 3}}) {
        std::mutex m;
        std::vector<std::string> wrong;
        expectNoErrors(runRanks(c.ranks, [&](Communicator& comm) {
          auto buf = exact::makeInput(type, count, comm.rank());
          algo->run(comm, buf.data(), count, type);
          std::string first;
          if (exact::countWrong(type, buf, count, c.ranks, &first) != 0) {
            std::lock_guard<std::mutex> lock(m);
            wrong.push_back(first);
          }
        }, c.ranksPerHost));
        EXPECT_TRUE(wrong.empty()) << c.name << " " << dataTypeName(type) << " count " << count
                                   << ": first wrong at " << wrong.front();
      }
    }
  }
}

TEST_P(StoreCommunicator, AllreduceOfDisagreeingSizesFailsOnEveryRank) {
  auto algo = makeAllreduce("ring");
  const auto errors = runRanks(3, [&](Communicator& comm) {
    const size_t count = comm.rank() == 1 ? 10 : 12;
    std::vector<float> buf(count, 1.f);
    algo->run(comm, buf.data(), count, DataType::kFloat32);
  });
  for (const std::string& e : errors) EXPECT_NE(e.find("count"), std::string::npos) << e;
}

TEST_P(StoreCommunicator, SplitGroupsAreIndependent) {
  expectNoErrors(runRanks(4, [](Communicator& comm) {
    auto half = comm.split(comm.rank() % 2, -comm.rank());  // key reverses the order
    ASSERT_EQ(half->size(), 2);
    EXPECT_EQ(half->rank(), comm.rank() < 2 ? 1 : 0);
    // The same tag in parent and child: neither takes the other's message.
    const int peer = 1 - half->rank();
    int mine = 100 + comm.rank(), theirs = -1;
    int parentOut = 200 + comm.rank(), parentIn = -1;
    const int parentPeer = comm.rank() ^ 1;
    auto r1 = half->isend(&mine, sizeof(mine), peer, 3);
    auto r2 = comm.isend(&parentOut, sizeof(parentOut), parentPeer, 3);
    comm.recv(&parentIn, sizeof(parentIn), parentPeer, 3);
    half->recv(&theirs, sizeof(theirs), peer, 3);
    r1->wait();
    r2->wait();
    EXPECT_EQ(theirs, 100 + (comm.rank() ^ 2));
    EXPECT_EQ(parentIn, 200 + parentPeer);
    auto sum = makeAllreduce("ring");
    float v = static_cast<float>(comm.rank());
    sum->run(*half, &v, 1, DataType::kFloat32);
    EXPECT_EQ(v, comm.rank() % 2 == 0 ? 2.f : 4.f);
  }));
}

int bigbatchShmObjects() {
  int count = 0;
  for (const std::string& prefix : {"bigbatch-" + std::to_string(getpid()) + "-",
                                    "bigbatch-ucx-" + std::to_string(getpid()) + "-"}) {
    if (DIR* d = opendir("/dev/shm")) {
      while (dirent* e = readdir(d)) {
        count += std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
      }
      closedir(d);
    }
  }
  return count;
}

TEST_P(StoreCommunicator, SharedSegmentSeenByEveryRankAndUnlinked) {
  expectNoErrors(runRanks(3, [](Communicator& comm) {
    SharedSegment& seg = comm.hostComm().sharedSegment("test", 100);
    EXPECT_GE(seg.slotBytes(), 100u);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(seg.slot(r)[0], 0) << "slots start zeroed";
    comm.barrier();
    std::memset(seg.slot(comm.rank()), 10 + comm.rank(), 100);
    comm.barrier();
    for (int r = 0; r < 3; ++r) EXPECT_EQ(seg.slot(r)[99], 10 + r);
    EXPECT_EQ(bigbatchShmObjects(), 0) << "the object is unlinked once every rank has it";
  }));
}

// A group made again in one store (destroy_process_group, then
// init_process_group, which hands the same prefix): the second world meets
// afresh instead of reading the first one's addresses.
TEST(ConnectOverStore, ASecondWorldInTheSameStoreMeetsAfresh) {
  InMemoryStore store;
  for (int generation = 0; generation < 2; ++generation) {
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto comm = connectOverStore(store, r, 2, "127.0.0.1", milliseconds(20000));
          int out = 10 * generation + r, in = -1;
          comm->sendrecv(&out, sizeof(out), 1 - r, &in, sizeof(in), 1 - r, 1);
          if (in != 10 * generation + 1 - r) errors[static_cast<size_t>(r)] = "wrong value";
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "generation " << generation << ", rank " << r;
    }
  }
}

// UCX's TCP segments (docs/TORCH_BACKEND.md, "Launching"): bigbatch's
// 256k pair where the user set neither; both left to the user beside
// either, since UCX refuses a send segment larger than the receive one and
// a user's 64k receive segment beside our 256k send one would stop it.
TEST(UcxTcpSegments, SetWhereTheUserSetNeitherAndLeftAloneBesideEither) {
  const char* tx = "UCX_TCP_TX_SEG_SIZE";
  const char* rx = "UCX_TCP_RX_SEG_SIZE";
  auto get = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string("(unset)");
  };
  const std::string savedTx = get(tx), savedRx = get(rx);
  auto set = [](const char* name, const std::string& v) {
    if (v == "(unset)") unsetenv(name);
    else setenv(name, v.c_str(), 1);
  };

  set(tx, "(unset)");
  set(rx, "(unset)");
  UcxCommunicator::setTcpSegmentDefaults();
  EXPECT_EQ(get(tx), "256k");
  EXPECT_EQ(get(rx), "256k");

  set(tx, "(unset)");
  set(rx, "64k");
  UcxCommunicator::setTcpSegmentDefaults();
  EXPECT_EQ(get(tx), "(unset)") << "a send segment of ours beside the user's receive one";
  EXPECT_EQ(get(rx), "64k");
  // And UCX starts with it: 2 ranks, a message of several segments each way.
  expectNoErrors(onRanks(2, connectUcx, [](Communicator& comm) {
    const int r = comm.rank();
    std::vector<int32_t> out(64 * 1024, r), in(out.size(), -1);
    comm.sendrecv(out.data(), out.size() * 4, 1 - r, in.data(), in.size() * 4, 1 - r, 1);
    if (in.front() != 1 - r || in.back() != 1 - r) throw std::runtime_error("wrong bytes");
  }));

  set(tx, "16k");
  set(rx, "(unset)");
  UcxCommunicator::setTcpSegmentDefaults();
  EXPECT_EQ(get(tx), "16k");
  EXPECT_EQ(get(rx), "(unset)");

  set(tx, savedTx);
  set(rx, savedRx);
}

BIGBATCH_INSTANTIATE_STORE_TRANSPORTS(Transports);

}  // namespace
}  // namespace bigbatch
