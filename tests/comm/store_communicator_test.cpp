// The store-bootstrapped transports (GlooCommunicator, UcxCommunicator),
// each rank a thread of this process, an in-memory store between them: the
// Communicator contract (sizes, tags, splits, shared memory, deadlines,
// error notices, a peer that goes away) and bigbatch's allreduce
// algorithms on top, exact. Every case runs on both transports.
#include "bigbatch/comm/gloo_communicator.h"
#include "bigbatch/comm/ucx_communicator.h"
#include "bigbatch/comm/world.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/collectives/exact_inputs.h"
#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

using std::chrono::milliseconds;

using Connect = std::function<std::unique_ptr<Communicator>(KeyValueStore&, int rank, int size,
                                                             int ranksPerHost, milliseconds)>;

std::string hostOf(int rank, int ranksPerHost) {
  return "host" + std::to_string(ranksPerHost > 0 ? rank / ranksPerHost : 0);
}

std::unique_ptr<Communicator> connectGloo(KeyValueStore& store, int rank, int size,
                                          int ranksPerHost, milliseconds timeout) {
  GlooOptions o;
  o.listenAddress = "127.0.0.1";
  o.timeout = timeout;
  o.hostName = hostOf(rank, ranksPerHost);
  return GlooCommunicator::connect(store, rank, size, o);
}

std::unique_ptr<Communicator> connectUcx(KeyValueStore& store, int rank, int size,
                                         int ranksPerHost, milliseconds timeout) {
  UcxOptions o;
  o.timeout = timeout;
  o.hostName = hostOf(rank, ranksPerHost);
  return UcxCommunicator::connect(store, rank, size, o);
}

struct Transport {
  std::string name;
  Connect connect;
};
// Test names and ctest's listing show the transport, not the struct's bytes.
void PrintTo(const Transport& t, std::ostream* os) { *os << t.name; }

bool isBroken(Communicator& comm) {
  if (auto* g = dynamic_cast<GlooCommunicator*>(&comm)) return g->broken();
  return dynamic_cast<UcxCommunicator&>(comm).broken();
}

class StoreCommunicator : public ::testing::TestWithParam<Transport> {
 protected:
  std::unique_ptr<Communicator> connect(KeyValueStore& store, int rank, int size,
                                        int ranksPerHost = 0,
                                        milliseconds timeout = milliseconds(30000)) {
    return GetParam().connect(store, rank, size, ranksPerHost, timeout);
  }

  // Runs fn on n ranks (threads); returns each rank's error ("" if none).
  std::vector<std::string> runRanks(int n, const std::function<void(Communicator&)>& fn,
                                    int ranksPerHost = 0) {
    InMemoryStore store;
    std::vector<std::string> errors(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto comm = connect(store, r, n, ranksPerHost);
          fn(*comm);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    return errors;
  }
};

void expectNoErrors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

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

TEST_P(StoreCommunicator, DisagreeingWorldSizesRefusedOnEveryRank) {
  InMemoryStore store;
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      try {
        connect(store, r, r == 1 ? 2 : 3);
      } catch (const InvalidArgument& e) {
        errors[static_cast<size_t>(r)] = e.what();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::string("wrong type: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("disagree on the world size"), std::string::npos)
        << "rank " << r << ": " << errors[static_cast<size_t>(r)];
  }
}

TEST_P(StoreCommunicator, MissingRankNamedAtTheDeadline) {
  InMemoryStore store;
  try {
    connect(store, 0, 2, 0, milliseconds(300));
    FAIL() << "connected without rank 1";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 did not reach"), std::string::npos) << e.what();
  }
}

TEST_P(StoreCommunicator, DeadlineNamesThePeerAndBreaksTheCommunicator) {
  std::atomic<bool> rank0Done{false};
  const auto errors = runRanks(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      while (!rank0Done) std::this_thread::sleep_for(milliseconds(1));
      return;
    }
    comm.setTimeoutMs(200);
    int v = 0;
    try {
      comm.recv(&v, sizeof(v), 1, 7);
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 did not send"), std::string::npos) << e.what();
      EXPECT_TRUE(isBroken(comm));
      if (GetParam().name == "gloo") {
        // The abandoned receive closed the pair: what comes next on it is
        // refused at once, not left to a deadline.
        EXPECT_THROW(comm.isend(&v, sizeof(v), 1, 8), PeerError);
      }
      rank0Done = true;
      return;
    }
    rank0Done = true;
    ADD_FAILURE() << "no TimeoutError";
  });
  expectNoErrors(errors);
}

// Gloo cannot tell a receive of another size (its slot carries a hash of the
// size, so the two never match: a TimeoutError); UCX can (MismatchError).
// Neither crashes, whichever side is longer.
TEST_P(StoreCommunicator, SizeDisagreementIsAnErrorNotACrash) {
  for (size_t sent : {size_t{8}, size_t{32}}) {
    std::atomic<bool> receiverDone{false};
    std::string error;
    expectNoErrors(runRanks(2, [&](Communicator& comm) {
      comm.setTimeoutMs(300);
      std::vector<char> buf(32, 'x');
      if (comm.rank() == 0) {
        auto r = comm.isend(buf.data(), sent, 1, 4);
        while (!receiverDone) std::this_thread::sleep_for(milliseconds(1));
        return;
      }
      try {
        comm.recv(buf.data(), 16, 0, 4);
      } catch (const Error& e) {
        error = e.what();
      }
      receiverDone = true;
    }));
    const char* expected = GetParam().name == "gloo" ? "did not send to this rank" : "expected";
    EXPECT_NE(error.find(expected), std::string::npos) << "sent " << sent << ": " << error;
  }
}

TEST_P(StoreCommunicator, ErrorNoticeEndsAPeersWait) {
  const auto errors = runRanks(3, [](Communicator& comm) {
    if (comm.rank() == 2) {
      comm.postError("the loss is NaN at step 7");
      return;
    }
    int v = 0;
    comm.recv(&v, sizeof(v), 2, 9);  // rank 2 never sends: only the notice can end this
  });
  for (int r : {0, 1}) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank 2 failed: the loss is NaN at step 7"),
              std::string::npos)
        << errors[static_cast<size_t>(r)];
  }
  EXPECT_EQ(errors[2], "");
}

// A peer whose communicator is destroyed: Gloo sees its connections close
// (PeerError at once). Over UCX a rank that ends normally says goodbye
// first, so the wait ends at once naming the normal end (PeerEndedError);
// without it, between two workers of one process over shared memory, only
// UCX's keep-alive would notice. A rank that dies is named by the deadline
// (under torchrun its agent ends the rest), or across hosts by TCP's reset.
TEST_P(StoreCommunicator, PeerThatGoesAwayIsNamed) {
  InMemoryStore store;
  std::string error;
  int endedType = 0;
  std::thread leaver([&] {
    auto comm = connect(store, 1, 2);
    comm->barrier();
  });  // its communicator, and so its connections, go with the thread
  try {
    auto comm = connect(store, 0, 2);
    comm->barrier();
    leaver.join();
    comm->setTimeoutMs(1000);
    int v = 0;
    comm->recv(&v, sizeof(v), 1, 2);
  } catch (const PeerEndedError& e) {
    error = e.what();
    endedType = 1;
  } catch (const PeerError& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = std::string("wrong type: ") + e.what();
  }
  if (leaver.joinable()) leaver.join();
  EXPECT_EQ(error.find("wrong type"), std::string::npos) << error;
  if (GetParam().name == "ucx") {
    EXPECT_NE(error.find("rank 1 ended its communicator normally while this rank waited to "
                         "receive from it (tag 2, 4 bytes)"),
              std::string::npos)
        << error;
    EXPECT_EQ(endedType, 1) << error;
  } else {
    EXPECT_NE(error.find("connection to rank 1 failed"), std::string::npos) << error;
  }
}

// Ranks on two hosts whose route to the store is loopback would listen where
// the other host cannot reach: every rank refuses, naming the fix, instead
// of the others waiting out the rendezvous.
TEST(GlooCommunicator, LoopbackAcrossHostsRefusedOnEveryRank) {
  InMemoryStore store;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o;
      o.routeTo = "127.0.0.1";
      o.timeout = milliseconds(20000);
      o.hostName = hostOf(r, 1);
      try {
        GlooCommunicator::connect(store, r, 2, o);
      } catch (const InvalidArgument& e) {
        errors[static_cast<size_t>(r)] = e.what();
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::string("wrong type: ") + e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("loopback address 127.0.0.1"), std::string::npos) << e;
    EXPECT_NE(e.find("BIGBATCH_SOCKET_IFNAME"), std::string::npos) << e;
  }
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

INSTANTIATE_TEST_SUITE_P(Transports, StoreCommunicator,
                         ::testing::Values(Transport{"gloo", connectGloo},
                                           Transport{"ucx", connectUcx}),
                         [](const ::testing::TestParamInfo<Transport>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace bigbatch
