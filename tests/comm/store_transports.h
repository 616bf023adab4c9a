// The fixture both store-transport test files share: a Communicator over
// Gloo or UCX per rank, each rank a thread of this process, an in-memory
// store between them (onRanks, and StoreCommunicator::runRanks over the
// transport under test), and the instantiation over both transports.
// Threading: onRanks starts one thread per rank and joins them all before
// it returns.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "bigbatch/comm/gloo_communicator.h"
#include "bigbatch/comm/ucx_communicator.h"
#include "bigbatch/comm/world.h"

namespace bigbatch {
namespace store_transports {

using std::chrono::milliseconds;

using Connect = std::function<std::unique_ptr<Communicator>(KeyValueStore&, int rank, int size,
                                                             int ranksPerHost, milliseconds)>;

inline std::string hostOf(int rank, int ranksPerHost) {
  return "host" + std::to_string(ranksPerHost > 0 ? rank / ranksPerHost : 0);
}

inline std::unique_ptr<Communicator> connectGloo(KeyValueStore& store, int rank, int size,
                                          int ranksPerHost, milliseconds timeout) {
  GlooOptions o;
  o.listenAddress = "127.0.0.1";
  o.timeout = timeout;
  o.hostName = hostOf(rank, ranksPerHost);
  return GlooCommunicator::connect(store, rank, size, o);
}

inline std::unique_ptr<Communicator> connectUcx(KeyValueStore& store, int rank, int size,
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
inline void PrintTo(const Transport& t, std::ostream* os) { *os << t.name; }

inline bool isBroken(Communicator& comm) {
  if (auto* g = dynamic_cast<GlooCommunicator*>(&comm)) return g->broken();
  return dynamic_cast<UcxCommunicator&>(comm).broken();
}

// Runs fn on n ranks (threads), each connected by `connect` through one
// in-memory store; returns each rank's error ("" if none).
inline std::vector<std::string> onRanks(int n, const Connect& connect,
                                        const std::function<void(Communicator&)>& fn,
                                        int ranksPerHost = 0,
                                        milliseconds timeout = milliseconds(30000)) {
  InMemoryStore store;
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto comm = connect(store, r, n, ranksPerHost, timeout);
        fn(*comm);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
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
    return onRanks(n, GetParam().connect, fn, ranksPerHost);
  }
};

inline void expectNoErrors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Each TEST_P of StoreCommunicator on both transports; the test names end
// in the transport's. PREFIX differs per binary: CTest names a test after
// its suite, PREFIX/StoreCommunicator (cmake/gtest_suites.cmake).
#define BIGBATCH_INSTANTIATE_STORE_TRANSPORTS(PREFIX)                                         \
  INSTANTIATE_TEST_SUITE_P(PREFIX, StoreCommunicator,                                         \
                           ::testing::Values(Transport{"gloo", connectGloo},                  \
                                             Transport{"ucx", connectUcx}),                   \
                           [](const ::testing::TestParamInfo<Transport>& info) {              \
                             return info.param.name;                                          \
                           })

}  // namespace store_transports
}  // namespace bigbatch
