// Multi-process allreduce check, run by CTest under mpirun with 1-4 ranks.
//   sweep:    every algorithm (mpi included) x counts {0, 1, 7, 1000, 2^20+3} x
//             float32/bfloat16/float16, exact inputs compared with ==.
//   mismatch: rank 1 passes another count; every rank must raise
//             MismatchError within the deadline (no hang, no garbage).
//   exit ALG: after one complete call, rank 1 joins the next call's signature
//             check, then _exit(3)s in the middle of the collective; the survivors must fail within the
//             deadline (5 s) instead of hanging (run by expect_failure.sh).
// Prints one line per case and exits non-zero on any failure.
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <unistd.h>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/comm/mpi_communicator.h"
#include "bigbatch/common/error.h"
#include "test_inputs.h"

using namespace bigbatch;

namespace {

int sweep(Communicator& comm) {
  int failures = 0;
  for (const auto& name : allreduceNames()) {
    auto algo = makeAllreduce(name);
    for (DataType type : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{(1u << 20) + 3}}) {
        auto buf = testing::makeInput(type, count, comm.rank());
        algo->run(comm, buf.data(), count, type);
        std::string first;
        const size_t wrong = testing::countWrong(type, buf, count, comm.size(), &first);
        if (wrong) {
          ++failures;
          fmt::print("FAIL rank {} {} {} count {}: {} wrong, first at {}\n", comm.rank(), name,
                     dataTypeName(type), count, wrong, first);
        }
      }
    }
    if (comm.rank() == 0) fmt::print("ok {} on {} ranks\n", name, comm.size());
  }
  return failures;
}

int mismatch(Communicator& comm) {
  comm.setTimeoutMs(10000);
  auto algo = makeAllreduce("ring");
  const size_t count = comm.rank() == 1 ? 1000 : 1024;
  std::vector<float> buf(count, 1.f);
  const auto start = std::chrono::steady_clock::now();
  try {
    algo->run(comm, buf.data(), count, DataType::kFloat32);
  } catch (const MismatchError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("ok rank {} caught the mismatch after {:.3f} s: {}\n", comm.rank(), s, e.what());
    return 0;
  }
  fmt::print("FAIL rank {}: no error for mismatched counts\n", comm.rank());
  return 1;
}

int exitMidCollective(Communicator& comm, const std::string& algorithm) {
  comm.setTimeoutMs(5000);
  auto algo = makeAllreduce(algorithm);
  std::vector<float> buf(size_t{1} << 20, 1.f);
  // One complete call first, so the second finds the shared window, the
  // sub-communicators and the peers' buffers already set up.
  algo->run(comm, buf.data(), buf.size(), DataType::kFloat32);
  if (comm.rank() == 1) {
    checkSameSignature(comm, 1, buf.size(), DataType::kFloat32);
    std::fflush(stdout);
    _exit(3);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    algo->run(comm, buf.data(), buf.size(), DataType::kFloat32);
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("rank {} detected the lost peer after {:.3f} s: {}\n", comm.rank(), s, e.what());
    std::fflush(stdout);
    return 2;
  }
  fmt::print("FAIL rank {}: the collective completed without rank 1\n", comm.rank());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "sweep";
  try {
    auto comm = MpiCommunicator::world();
    comm->setTimeoutMs(30000);
    if (mode == "exit") {
      // No barrier, no MPI_Finalize: the job has lost a rank.
      const int rc = exitMidCollective(*comm, argc > 2 ? argv[2] : "shm");
      std::_Exit(rc);
    }
    int failures = mode == "mismatch" ? mismatch(*comm) : sweep(*comm);
    std::fflush(stdout);
    if (mode == "mismatch" && comm->size() > 1) {
      // Drain nothing: the peers' error notices may still be in flight.
    } else {
      comm->barrier();
    }
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    fmt::print("FAIL: {}\n", e.what());
    return 1;
  }
}
