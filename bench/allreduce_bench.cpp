// nccl-tests-style allreduce benchmark over MPI (run it under mpirun).
//
//   mpirun -np 2 build/bench/allreduce_bench [--min-bytes 4096] [--max-bytes 268435456]
//          [--algorithms ring,halving_doubling,recursive_doubling,mpi] [--json]
//
// For each size (x2 steps) and algorithm: warm up, time `iters` in-place
// float32 sums (iters shrink with size), then verify one more call with exact
// inputs. Columns as nccl-tests: size (B), count, type, time (us), algbw and
// busbw (GB/s, GB = 1e9 B, busbw = algbw * 2(n-1)/n), #wrong.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>

#include "../tests/collectives/test_inputs.h"
#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/comm/mpi_communicator.h"

using namespace bigbatch;

int main(int argc, char** argv) {
  CLI::App app{"allreduce benchmark (nccl-tests columns)"};
  size_t minBytes = 4096, maxBytes = size_t{256} << 20;
  std::string algorithms = "ring,halving_doubling,recursive_doubling,mpi";
  bool json = false;
  app.add_option("--min-bytes", minBytes, "smallest message (default 4096)");
  app.add_option("--max-bytes", maxBytes, "largest message (default 268435456)");
  app.add_option("--algorithms", algorithms, "comma-separated list (default: all)");
  app.add_flag("--json", json, "print one JSON object per row instead of the table");
  CLI11_PARSE(app, argc, argv);

  auto comm = MpiCommunicator::world();
  const int n = comm->size();
  std::vector<std::string> names;
  for (size_t a = 0, b; a < algorithms.size(); a = b + 1) {
    b = algorithms.find(',', a);
    if (b == std::string::npos) b = algorithms.size();
    names.push_back(algorithms.substr(a, b - a));
  }
  if (comm->rank() == 0 && !json) {
    fmt::print("# {} ranks, float32 sum, in place\n", n);
    fmt::print("{:>20} {:>12} {:>12} {:>7} {:>10} {:>8} {:>8} {:>7}\n", "algorithm", "size", "count",
               "type", "time(us)", "algbw", "busbw", "#wrong");
  }
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 2) {
    const size_t count = bytes / 4;
    for (const auto& name : names) {
      AllreduceOptions o;
      o.checkSignature = false;  // measured separately; the records compare raw algorithms
      auto algo = makeAllreduce(name, o);
      std::vector<float> buf(count, 1.f);
      const int iters = static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / (bytes * 8), 5, 200));
      for (int i = 0; i < 3; ++i) algo->run(*comm, buf.data(), count, DataType::kFloat32);
      comm->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) algo->run(*comm, buf.data(), count, DataType::kFloat32);
      double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
      // The slowest rank's time is the collective's time.
      MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, comm->handle());
      auto check = testing::makeInput(DataType::kFloat32, count, comm->rank());
      algo->run(*comm, check.data(), count, DataType::kFloat32);
      long long wrong = static_cast<long long>(testing::countWrong(DataType::kFloat32, check, count, n, nullptr));
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, comm->handle());
      const double algbw = static_cast<double>(bytes) / (us * 1e-6) / 1e9;
      const double busbw = algbw * 2.0 * (n - 1) / n;
      if (comm->rank() == 0) {
        if (json) {
          nlohmann::ordered_json row = {{"algorithm", name}, {"ranks", n},       {"bytes", bytes},
                                        {"count", count},    {"type", "float"}, {"time_us", us},
                                        {"algbw", algbw},    {"busbw", busbw},  {"wrong", wrong}};
          fmt::print("{}\n", row.dump());
        } else {
          fmt::print("{:>20} {:>12} {:>12} {:>7} {:>10.1f} {:>8.2f} {:>8.2f} {:>7}\n", name, bytes,
                     count, "float", us, algbw, busbw, wrong);
        }
        std::fflush(stdout);
      }
    }
  }
  comm->barrier();
  return 0;
}
