// How the store-bootstrapped transports fail (each rank a thread of this
// process, an in-memory store between them; every case on Gloo and UCX):
// ranks that disagree on the world's size or a message's, a rank that never
// comes or never sends (named at the deadline), another rank's error
// notice, a peer that goes away (a normal end named as one over UCX), and
// a loopback listen address across hosts.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bigbatch/common/error.h"
#include "store_transports.h"

namespace bigbatch {
namespace {

using namespace store_transports;

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

// UCX_TLS without tcp leaves UCX only transports that do not report a
// peer's failure: every rank refuses in one line naming UCX_TLS and the way
// out, instead of UCX's bare "Destination is unreachable".
TEST(UcxCommunicator, TransportsWithoutPeerFailureRefusedOnEveryRank) {
  const char* old = std::getenv("UCX_TLS");
  const std::string saved = old ? old : "";
  setenv("UCX_TLS", "shm,self", 1);
  const auto errors = onRanks(2, connectUcx, [](Communicator&) {});
  if (old) setenv("UCX_TLS", saved.c_str(), 1);
  else unsetenv("UCX_TLS");
  for (int r = 0; r < 2; ++r) {
    const std::string& e = errors[static_cast<size_t>(r)];
    EXPECT_NE(e.find("UCX could not reach rank " + std::to_string(1 - r)), std::string::npos) << e;
    EXPECT_NE(e.find("UCX_TLS is shm,self (include tcp"), std::string::npos) << e;
    EXPECT_NE(e.find("BIGBATCH_TRANSPORT=gloo"), std::string::npos) << e;
  }
}

BIGBATCH_INSTANTIATE_STORE_TRANSPORTS(TransportFailures);

}  // namespace
}  // namespace bigbatch
