// Multi-process allreduce check, run by CTest under mpirun with 1-4 ranks.
//   sweep:    every algorithm (mpi included) x counts {0, 1, 7, 1000, 2^20+3} x
//             float32/bfloat16/float16, exact inputs compared with ==.
//   mismatch: rank 1 passes another count; every rank must raise
//             MismatchError within the deadline (no hang, no garbage).
//   exit ALG: after one complete call, rank 1 joins the next call's signature
//             check, then _exit(3)s in the middle of the collective; the survivors must fail within the
//             deadline (5 s) instead of hanging (run by expect_failure.sh).
//   windows:  a shared segment grown six times and six sub-communicators
//             with segments of their own leave one window alive, and none
//             once its communicator goes (MPI_Win_free); tmpfs (/dev/shm)
//             gets its space back.
// Prints one line per case and exits non-zero on any failure.
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <sys/statvfs.h>
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

// Bytes in use on /dev/shm (where Open MPI backs shared windows), -1 if none.
int64_t shmBytesUsed() {
  struct statvfs v;
  if (statvfs("/dev/shm", &v) != 0) return -1;
  return static_cast<int64_t>(v.f_blocks - v.f_bfree) * static_cast<int64_t>(v.f_frsize);
}

int sharedWindows() {
  int failures = 0, rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) ++failures;
    fmt::print("{} rank {}: {}\n", ok ? "ok" : "FAIL", rank, what);
  };
  const int64_t before = shmBytesUsed();
  const int baseline = MpiCommunicator::liveSharedWindows();
  {
    auto comm = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
    comm->setTimeoutMs(30000);
    // Grown six times, 1 to 32 MiB per rank: each larger one replaces the last.
    for (int i = 0; i < 6; ++i) {
      SharedSegment& s = comm->sharedSegment("grow", (size_t{1} << 20) << i);
      std::memset(s.slot(comm->rank()), 1, s.slotBytes());
    }
    const int live = MpiCommunicator::liveSharedWindows() - baseline;
    const int64_t grown = shmBytesUsed();
    for (int i = 0; i < 6; ++i) {
      auto sub = comm->split(0, comm->rank());
      sub->sharedSegment("x", 4096);
    }
    if (comm->rank() == 0) {
      check(live == 1, fmt::format("{} window(s) alive after six growths (want 1)", live));
      check(MpiCommunicator::liveSharedWindows() - baseline == 1,
            fmt::format("{} window(s) alive after six sub-communicators came and went (want 1)",
                        MpiCommunicator::liveSharedWindows() - baseline));
      // Unfreed, the six growths would hold 63 MiB per rank; freed, 32.
      if (before >= 0) {
        const double mib = static_cast<double>(grown - before) / (1 << 20);
        check(mib < 40.0 * comm->size(),
              fmt::format("/dev/shm grew by {:.0f} MiB with a 32 MiB slot per rank", mib));
      }
    }
    comm->barrier();
  }
  const int left = MpiCommunicator::liveSharedWindows() - baseline;
  check(left == 0, fmt::format("{} window(s) alive after the communicator went (want 0)", left));
  return failures;
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
    int failures = mode == "mismatch"  ? mismatch(*comm)
                   : mode == "windows" ? sharedWindows()
                                       : sweep(*comm);
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
