// For each size (x2 steps) and algorithm: warm up, time `iters` in-place
// sums, then verify one more call with exact inputs (exact_inputs.h: element
// i on rank r is (i mod 7) + r, exact sums even in bfloat16 up to 8 ranks)
// and count wrong elements. The time is the slowest rank's average.
// Columns as nccl-tests: size (B), count, type, time (us), algbw and busbw
// (GB/s, GB = 1e9 B, busbw = algbw·2(n-1)/n), #wrong. The memcpy row is rank
// 0 copying the same bytes alone (the others wait), the shared-memory limit:
// a 2-rank allreduce must at least read and write its S bytes once.
#include "bench_allreduce.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/collectives/exact_inputs.h"
#include "bigbatch/comm/mpi_communicator.h"
#include "bigbatch/comm/world.h"
#include "bigbatch/common/error.h"
#include "list_arg.h"
#include "bigbatch/common/logging.h"

namespace bigbatch {
namespace {

DataType parseType(const std::string& t) {
  if (t == "float32" || t == "float") return DataType::kFloat32;
  if (t == "bfloat16") return DataType::kBFloat16;
  if (t == "float16" || t == "half") return DataType::kFloat16;
  BIGBATCH_THROW(InvalidArgument, "--type '{}': choose float32, bfloat16 or float16", t);
}

}  // namespace

constexpr int kBenchTag = 0x7e10;

int runBenchAllreduce(const BenchAllreduceOptions& o) {
  const DataType type = parseType(o.type);
  const size_t elem = elementSize(type);
  BIGBATCH_REQUIRE(o.minBytes >= elem && o.minBytes <= o.maxBytes, InvalidArgument,
                   "--min-bytes {} must be at least one element ({} B) and at most --max-bytes {}",
                   o.minBytes, elem, o.maxBytes);
  const auto names = splitList(o.algorithms);
  BIGBATCH_REQUIRE(!names.empty(), InvalidArgument, "--algorithms is empty; e.g. auto,shm,mpi");
  for (const auto& name : names) makeAllreduce(name);  // unknown names fail before MPI work

  // The launcher's world (MPI under mpirun or srun, UCX or Gloo under
  // torchrun); alone, MPI's world of one.
  std::unique_ptr<Communicator> comm =
      launchedByLauncher() ? connectWorld(std::chrono::milliseconds(o.timeoutMs))
                           : std::unique_ptr<Communicator>(MpiCommunicator::world());
  comm->setTimeoutMs(o.timeoutMs);
  initLogging(comm->rank(), Verbosity::kQuiet);
  const int n = comm->size();
  const int rank = comm->rank();
  auto print = [&](const std::string& name, size_t bytes, double us, long long wrong) {
    if (rank != 0) return;
    const double algbw = us > 0 ? static_cast<double>(bytes) / (us * 1e-6) / 1e9 : 0;
    const double busbw = name == "memcpy" ? algbw : algbw * 2.0 * (n - 1) / n;
    if (o.json) {
      nlohmann::ordered_json row = {{"algorithm", name}, {"ranks", n},
                                    {"local_ranks", comm->localSize()},
                                    {"bytes", bytes},    {"count", bytes / elem},
                                    {"type", dataTypeName(type)},
                                    {"time_us", us},     {"algbw", algbw},
                                    {"busbw", busbw},    {"wrong", wrong}};
      fmt::print("{}\n", row.dump());
    } else {
      fmt::print("{:>20} {:>12} {:>12} {:>9} {:>10.1f} {:>8.2f} {:>8.2f} {:>7}\n", name, bytes,
                 bytes / elem, dataTypeName(type), us, algbw, busbw,
                 name == "memcpy" ? std::string("-") : std::to_string(wrong));
    }
    std::fflush(stdout);
  };
  if (rank == 0 && !o.json) {
    fmt::print("# bigbatch bench allreduce: {} ranks ({} on this host), {} sum, in place\n", n,
               comm->localSize(), dataTypeName(type));
    fmt::print("# time = slowest rank's mean; busbw = algbw*2(n-1)/n; memcpy = rank 0 alone\n");
    fmt::print("{:>20} {:>12} {:>12} {:>9} {:>10} {:>8} {:>8} {:>7}\n", "algorithm", "size",
               "count", "type", "time(us)", "algbw", "busbw", "#wrong");
  }
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= 2) {
    const size_t count = bytes / elem;
    const int iters = o.iterations > 0
                          ? o.iterations
                          : static_cast<int>(std::clamp<size_t>((size_t{2} << 30) / (bytes * 4), 5, 200));
    std::vector<uint8_t> buf(count * elem);
    if (o.memcpy) {
      double us = 0;
      if (rank == 0) {
        std::vector<uint8_t> dst(buf.size());
        std::memset(buf.data(), 1, buf.size());
        std::memcpy(dst.data(), buf.data(), buf.size());  // fault the pages in
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) {
          std::memcpy(dst.data(), buf.data(), buf.size());
          asm volatile("" : : "r"(dst.data()) : "memory");  // keep every copy
        }
        us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
      }
      comm->barrier();
      print("memcpy", bytes, us, 0);
    }
    const auto sumWrong = makeAllreduce("recursive_doubling");
    for (const auto& name : names) {
      AllreduceOptions ao;
      if (o.shmChunkBytes) ao.shmChunkBytes = o.shmChunkBytes;
      if (o.segmentBytes) ao.segmentBytes = o.segmentBytes;
      if (o.pipelineBytes) ao.pipelineBytes = o.pipelineBytes;
      if (o.noPipeline) ao.pipelineBytes = 0;
      auto algo = makeAllreduce(name, ao);
      buf = exact::makeInput(type, count, rank);
      for (int i = 0; i < o.warmup; ++i) algo->run(*comm, buf.data(), count, type);
      comm->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) algo->run(*comm, buf.data(), count, type);
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
      // The slowest rank's time and every rank's wrong elements, with
      // bigbatch's own reductions (the world may be Gloo's, not MPI's).
      int64_t ns = std::llround(us * 1000.0);
      allreduceMaxInt64(*comm, &ns, 1, kBenchTag);
      us = static_cast<double>(ns) / 1000.0;
      buf = exact::makeInput(type, count, rank);
      algo->run(*comm, buf.data(), count, type);
      int64_t wrong = static_cast<int64_t>(exact::countWrong(type, buf, count, n, nullptr));
      sumWrong->run(*comm, &wrong, 1, DataType::kInt64);
      print(name, bytes, us, wrong);
    }
  }
  comm->barrier();
  return 0;
}

}  // namespace bigbatch
