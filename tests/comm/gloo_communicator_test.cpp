// GlooCommunicator, its ranks as threads of this process over loopback TCP
// and an in-memory store: the Communicator contract (sizes, tags, splits,
// shared memory, deadlines, error notices, a peer that goes away) and
// bigbatch's allreduce algorithms on top, exact.
#include "bigbatch/comm/gloo_communicator.h"

#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <atomic>
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

GlooOptions options(int rank, int ranksPerHost, milliseconds timeout = milliseconds(30000)) {
  GlooOptions o;
  o.listenAddress = "127.0.0.1";
  o.timeout = timeout;
  o.hostName = "host" + std::to_string(ranksPerHost > 0 ? rank / ranksPerHost : 0);
  return o;
}

// Runs fn on n ranks (threads); returns each rank's error ("" if none).
std::vector<std::string> runRanks(int n, const std::function<void(GlooCommunicator&)>& fn,
                                  int ranksPerHost = 0) {
  InMemoryStore store;
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = GlooCommunicator::connect(store, r, n, options(r, ranksPerHost));
        fn(*comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void expectNoErrors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(GlooCommunicator, RingOfMessagesOfEverySize) {
  expectNoErrors(runRanks(3, [](GlooCommunicator& comm) {
    EXPECT_EQ(comm.size(), 3);
    EXPECT_EQ(comm.transportName(), "Gloo TCP");
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

TEST(GlooCommunicator, TagsKeepMessagesApart) {
  expectNoErrors(runRanks(2, [](GlooCommunicator& comm) {
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

TEST(GlooCommunicator, HostsAndLocalRanksFromHostNames) {
  expectNoErrors(runRanks(4, [](GlooCommunicator& comm) {
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

TEST(GlooCommunicator, EveryAllreduceAlgorithmSumsExactly) {
  for (const AlgorithmCase c : {AlgorithmCase{"ring", 3, 0}, {"halving_doubling", 4, 2},
                                {"recursive_doubling", 3, 0}, {"shm", 3, 0},
                                {"hierarchical", 4, 2}, {"auto", 4, 2}}) {
    auto algo = makeAllreduce(c.name);
    for (DataType type : {DataType::kFloat32, DataType::kFloat16}) {
      for (size_t count : {size_t{1}, size_t{1000}, size_t{(1u << 20) + 3}}) {
        std::mutex m;
        std::vector<std::string> wrong;
        expectNoErrors(runRanks(c.ranks, [&](GlooCommunicator& comm) {
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

TEST(GlooCommunicator, AllreduceOfDisagreeingSizesFailsOnEveryRank) {
  auto algo = makeAllreduce("ring");
  const auto errors = runRanks(3, [&](GlooCommunicator& comm) {
    const size_t count = comm.rank() == 1 ? 10 : 12;
    std::vector<float> buf(count, 1.f);
    algo->run(comm, buf.data(), count, DataType::kFloat32);
  });
  for (const std::string& e : errors) EXPECT_NE(e.find("count"), std::string::npos) << e;
}

TEST(GlooCommunicator, SplitGroupsAreIndependent) {
  expectNoErrors(runRanks(4, [](GlooCommunicator& comm) {
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
  const std::string prefix = "bigbatch-" + std::to_string(getpid()) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) count += std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0;
    closedir(d);
  }
  return count;
}

TEST(GlooCommunicator, SharedSegmentSeenByEveryRankAndUnlinked) {
  expectNoErrors(runRanks(3, [](GlooCommunicator& comm) {
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

TEST(GlooCommunicator, DisagreeingWorldSizesRefusedOnEveryRank) {
  InMemoryStore store;
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      try {
        GlooCommunicator::connect(store, r, r == 1 ? 2 : 3,
                                  options(r, 0));
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

TEST(GlooCommunicator, MissingRankNamedAtTheDeadline) {
  InMemoryStore store;
  try {
    GlooCommunicator::connect(store, 0, 2, options(0, 0, milliseconds(300)));
    FAIL() << "connected without rank 1";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 did not reach"), std::string::npos) << e.what();
  }
}

TEST(GlooCommunicator, DeadlineNamesThePeerAndBreaksTheCommunicator) {
  std::atomic<bool> rank0Done{false};
  const auto errors = runRanks(2, [&](GlooCommunicator& comm) {
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
      EXPECT_TRUE(comm.broken());
      rank0Done = true;
      return;
    }
    rank0Done = true;
    ADD_FAILURE() << "no TimeoutError";
  });
  expectNoErrors(errors);
}

TEST(GlooCommunicator, SizeDisagreementIsATimeoutNotACrash) {
  std::atomic<bool> rank1Done{false};
  expectNoErrors(runRanks(2, [&](GlooCommunicator& comm) {
    comm.setTimeoutMs(300);
    std::vector<char> buf(16, 'x');
    if (comm.rank() == 0) {
      auto r = comm.isend(buf.data(), 8, 1, 4);  // never matched: left pending
      while (!rank1Done) std::this_thread::sleep_for(milliseconds(1));
      return;
    }
    EXPECT_THROW(comm.recv(buf.data(), 16, 0, 4), TimeoutError);
    rank1Done = true;
  }));
}

TEST(GlooCommunicator, ErrorNoticeEndsAPeersWait) {
  const auto errors = runRanks(3, [](GlooCommunicator& comm) {
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

TEST(GlooCommunicator, PeerThatGoesAwayIsAPeerError) {
  InMemoryStore store;
  std::string error;
  std::thread leaver([&] {
    auto comm = GlooCommunicator::connect(store, 1, 2, options(1, 0));
    comm->barrier();
  });  // its communicator, and so its connections, go with the thread
  try {
    auto comm = GlooCommunicator::connect(store, 0, 2, options(0, 0));
    comm->barrier();
    leaver.join();
    int v = 0;
    comm->recv(&v, sizeof(v), 1, 2);
  } catch (const PeerError& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = std::string("wrong type: ") + e.what();
  }
  if (leaver.joinable()) leaver.join();
  EXPECT_NE(error.find("connection to rank 1 failed"), std::string::npos) << error;
}

}  // namespace
}  // namespace bigbatch
