// Every algorithm x world size 1..8 x element count x type, in-process, with
// exact rank-derived inputs compared with ==. A tiny segment size drives the
// ring's multi-segment path, and tiny pieces the hierarchical pipeline,
// without large buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include <fmt/format.h>

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
    // The hierarchical pipeline across hosts: its default pieces (256 KiB x
    // the ranks: no call here is two of them, so one piece), 1 MiB pieces
    // (4 in the largest call) and 64-byte ones (from 16 elements a call: up
    // to 62 pieces; counts 1 and 7 stay one piece).
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
// (each piece's inter-host ring in flight while the next is staged), or of
// 4 bytes (one or two elements a piece: most local blocks empty).
TEST(Allreduce, HierarchicalBackToBackCallsStayExact) {
  for (size_t pipelineBytes : {size_t{0}, size_t{256}, size_t{4}}) {
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
}

// AllreduceStages: the buffer starts as garbage; fill() writes this rank's
// input into each piece, drain() copies each piece's sum out. Every element
// must be filled once and drained once, in ascending pieces, with the exact
// sum drained; the pipelined hierarchical allreduce must fill pieces while
// earlier ones are still in flight (a drain between fills), and every other
// case fill all, then drain all. "auto" without tuning always runs the
// table's hierarchical (pipelined); with tuning, its first calls rotate
// through the candidates, the pipelined hierarchical and the ring (one
// pass), until a winner is kept: both kinds must be seen.
enum class Staging { kOnePass, kPieces, kBoth };

// One staged call on this rank: "" if it filled, drained and summed as
// `expect` says, else what went wrong; `*pieced` says whether it ran in
// pieces.
std::string stagedCall(Allreduce& algo, Communicator& comm, DataType t, size_t count,
                       Staging expect, bool* pieced) {
  const size_t elem = elementSize(t);
  const auto input = makeInput(t, count, comm.rank());
  std::vector<uint8_t> buf(count * elem, 0xff), out(count * elem, 0xff);
  struct Recorder : AllreduceStages {
    Recorder(const uint8_t* input, uint8_t* buf, uint8_t* out, size_t elem)
        : input(input), buf(buf), out(out), elem(elem) {}
    void fill(size_t b, size_t e) override {
      calls.push_back({'f', {b, e}});
      std::copy(input + b * elem, input + e * elem, buf + b * elem);
    }
    void drain(size_t b, size_t e) override {
      calls.push_back({'d', {b, e}});
      std::copy(buf + b * elem, buf + e * elem, out + b * elem);
    }
    const uint8_t* input;
    uint8_t *buf, *out;
    size_t elem;
    std::vector<std::pair<char, std::pair<size_t, size_t>>> calls;
  } stages(input.data(), buf.data(), out.data(), elem);
  algo.run(comm, buf.data(), count, t, stages);

  size_t nextFill = 0, nextDrain = 0, fills = 0;
  bool drainBetweenFills = false;
  for (const auto& [kind, range] : stages.calls) {
    size_t& next = kind == 'f' ? nextFill : nextDrain;
    if (range.first != next || range.second <= range.first) {
      return fmt::format("{} [{}, {}) where [{}, ...) was next", kind, range.first, range.second,
                         next);
    }
    next = range.second;
    if (kind == 'f') ++fills;
    if (kind == 'd' && nextFill < count) drainBetweenFills = true;
  }
  if (nextFill != count || nextDrain != count) {
    return fmt::format("filled to {}, drained to {} of {}", nextFill, nextDrain, count);
  }
  const bool pieces = fills > 1 && drainBetweenFills;
  const bool onePass = fills == 1 && !drainBetweenFills;
  *pieced = pieces;
  if (count > 0 && ((expect == Staging::kPieces && !pieces) ||
                    (expect == Staging::kOnePass && !onePass) ||
                    (expect == Staging::kBoth && !pieces && !onePass))) {
    return fmt::format("{} fills, a drain between fills: {}", fills, drainBetweenFills);
  }
  std::string first;
  if (countWrong(t, out, count, comm.size(), &first)) return "wrong sum at " + first;
  return "";
}

TEST(Allreduce, StagesFillAndDrainEveryElementOnceWithTheExactSum) {
  struct Setup {
    std::string algorithm;
    int ranksPerHost;
    size_t pipelineBytes;
    Staging expect;  // with 4 ranks, 2 a host, and 4000 elements; else one pass
    int tuneTrials = 0;
    int calls = 1;  // per (ranks, count, type)
  };
  const std::vector<Setup> setups = {
      {"ring", 0, 0, Staging::kOnePass},
      {"shm", 0, 0, Staging::kOnePass},
      {"hierarchical", 2, 0, Staging::kOnePass},
      {"hierarchical", 3, 256, Staging::kOnePass},  // hosts of 3 and 1: not pipelined
      {"hierarchical", 2, 256, Staging::kPieces},
      {"auto", 2, 256, Staging::kPieces},
      {"auto", 2, 256, Staging::kBoth, /*tuneTrials=*/2, /*calls=*/8}};
  for (const Setup& setup : setups) {
    AllreduceOptions o;
    o.shmChunkBytes = 512;
    o.pipelineBytes = setup.pipelineBytes;
    o.tuneTrials = setup.tuneTrials;
    for (int n : {1, 4}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{4000}}) {
        for (DataType t : {DataType::kFloat32, DataType::kFloat16}) {
          const Staging expect = n == 4 && count == 4000 ? setup.expect : Staging::kOnePass;
          auto algo = makeAllreduce(setup.algorithm, o);  // "auto" tunes afresh
          std::mutex m;
          std::vector<std::string> failures;
          runInProcess(n, [&](Communicator& comm) {
            int pieced = 0;
            for (int call = 0; call < setup.calls; ++call) {
              bool inPieces = false;
              std::string why = stagedCall(*algo, comm, t, count, expect, &inPieces);
              pieced += inPieces;
              if (why.empty() && expect == Staging::kBoth && call + 1 == setup.calls &&
                  (pieced == 0 || pieced == setup.calls)) {
                why = fmt::format("{} of {} calls in pieces; tuning must try both", pieced,
                                  setup.calls);
              }
              if (!why.empty()) {
                std::lock_guard<std::mutex> lock(m);
                failures.push_back(fmt::format("rank {} call {}: {}", comm.rank(), call, why));
              }
            }
          }, setup.ranksPerHost);
          EXPECT_TRUE(failures.empty())
              << setup.algorithm << ", " << setup.ranksPerHost << " a host, pieces of "
              << setup.pipelineBytes << " B, tuning " << setup.tuneTrials << ", n=" << n
              << " count=" << count << " " << dataTypeName(t) << ": " << failures.front();
        }
      }
    }
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
// the deadline and names a rank. `size` ranks, `ranksPerHost` a host (0: one
// host). One whole call first, so that the communicator's splits and
// shared segments are in place; in the second, rank 1 leaves. Each of
// `expected` must be in some rank's error: where the waits were.
void expectRankLeavingTimesOut(Allreduce& algo, int size, int ranksPerHost,
                               const std::string& what,
                               const std::vector<std::string>& expected = {}) {
  std::atomic<int> timeouts{0}, namesRank1{0};
  std::mutex m;
  std::vector<std::string> messages;
  const auto start = std::chrono::steady_clock::now();
  try {
    runInProcess(size,
                 [&](Communicator& comm) {
                   std::vector<float> buf(4096, 1.f);
                   algo.run(comm, buf.data(), buf.size(), DataType::kFloat32);
                   if (comm.rank() == 1) {
                     checkSameSignature(comm, 1, buf.size(), DataType::kFloat32);
                     return;  // gone, mid-collective from the others' view
                   }
                   try {
                     algo.run(comm, buf.data(), buf.size(), DataType::kFloat32);
                   } catch (const TimeoutError& e) {
                     // A rank waiting on a survivor that waits on rank 1
                     // names its own silent neighbour; one names rank 1.
                     namesRank1 += std::string(e.what()).find("rank 1 ") != std::string::npos;
                     ++timeouts;
                     std::lock_guard<std::mutex> lock(m);
                     messages.push_back(e.what());
                     throw;
                   }
                 },
                 ranksPerHost, 400);
    ADD_FAILURE() << what << ": expected an error";
  } catch (const Error&) {
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(timeouts.load(), 1) << what;
  EXPECT_GE(namesRank1.load(), 1) << what;
  for (const std::string& want : expected) {
    EXPECT_TRUE(std::any_of(messages.begin(), messages.end(),
                            [&](const std::string& e) { return e.find(want) != std::string::npos; }))
        << what << ": no error says '" << want << "'";
  }
  EXPECT_LT(s, 5.0) << what;
}

TEST(Allreduce, RankLeavingMidCollectiveTimesOut) {
  for (const char* a : {"ring", "halving_doubling", "shm", "hierarchical"}) {
    expectRankLeavingTimesOut(*makeAllreduce(a), 3, 0, a);
  }
}

// The same across 2 hosts of 2 ranks with the hierarchical pipeline in 16
// pieces (4096 floats, 1 KiB pieces): rank 1 leaves while its host peer,
// rank 0, waits for it in the first piece's shared-memory reduce-scatter,
// and its ring peer across the hosts, rank 3, waits for its first piece's
// ring message (the pipeline's tags: 0x7f08 = 32520 for piece 0).
TEST(Allreduce, PipelinedHierarchicalRankLeavingTimesOut) {
  AllreduceOptions o;
  o.pipelineBytes = 1024;
  expectRankLeavingTimesOut(*makeAllreduce("hierarchical", o), 4, 2, "pipelined hierarchical",
                            {"did not reach step", "(tag 32520)"});
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
