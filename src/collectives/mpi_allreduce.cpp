#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <climits>
#include <mutex>

#include "bigbatch/collectives/algorithms.h"
#include "bigbatch/comm/mpi_communicator.h"
#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

// MPI has no 16-bit float types: two distinct duplicates of MPI_UINT16_T tell
// the user-defined sum which encoding it is adding.
MPI_Datatype gHalfType = MPI_DATATYPE_NULL, gBf16Type = MPI_DATATYPE_NULL;
MPI_Op gLowPrecisionSum = MPI_OP_NULL;

void lowPrecisionSum(void* in, void* inout, int* len, MPI_Datatype* type) {
  if (*type == gHalfType) {
    sumInto(DataType::kFloat16, inout, in, static_cast<size_t>(*len));
  } else {
    sumInto(DataType::kBFloat16, inout, in, static_cast<size_t>(*len));
  }
}

void initLowPrecision() {
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_Type_dup(MPI_UINT16_T, &gHalfType);
    MPI_Type_commit(&gHalfType);
    MPI_Type_dup(MPI_UINT16_T, &gBf16Type);
    MPI_Type_commit(&gBf16Type);
    MPI_Op_create(&lowPrecisionSum, /*commute=*/1, &gLowPrecisionSum);
  });
}

}  // namespace

void MpiAllreduce::reduce(Communicator& comm, void* data, size_t count, DataType type) {
  auto* mpi = dynamic_cast<MpiCommunicator*>(&comm);
  BIGBATCH_REQUIRE(mpi != nullptr, InvalidArgument,
                   "the 'mpi' allreduce needs an MPI communicator, got {} (started by "
                   "torchrun?): choose another algorithm, or start the ranks with mpirun",
                   comm.transportName());
  BIGBATCH_REQUIRE(count <= static_cast<size_t>(INT_MAX), InvalidArgument,
                   "{} elements exceed MPI's int count", count);
  MPI_Datatype mpiType = MPI_FLOAT;
  MPI_Op op = MPI_SUM;
  switch (type) {
    case DataType::kFloat32: mpiType = MPI_FLOAT; break;
    case DataType::kInt64: mpiType = MPI_INT64_T; break;
    case DataType::kUInt8: mpiType = MPI_UINT8_T; break;
    case DataType::kFloat64: mpiType = MPI_DOUBLE; break;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      initLowPrecision();
      mpiType = type == DataType::kFloat16 ? gHalfType : gBf16Type;
      op = gLowPrecisionSum;
      break;
  }
  checkMpi(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), mpiType, op, mpi->handle()),
           "MPI_Allreduce");
}

}  // namespace bigbatch
