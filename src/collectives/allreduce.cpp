#include "bigbatch/collectives/allreduce.h"

#include <cstring>

#include "bigbatch/collectives/algorithms.h"
#include "bigbatch/collectives/allreduce_selector.h"
#include "fold.h"
#include "bigbatch/common/error.h"

namespace bigbatch {

void Allreduce::run(Communicator& comm, void* data, size_t count, DataType type) {
  runWith(comm, data, count, type, nullptr);
}

void Allreduce::run(Communicator& comm, void* data, size_t count, DataType type,
                    AllreduceStages& stages) {
  runWith(comm, data, count, type, &stages);
}

void Allreduce::runWith(Communicator& comm, void* data, size_t count, DataType type,
                        AllreduceStages* stages) {
  if (options_.checkSignature && comm.size() > 1) {
    checkSameSignature(comm, /*operation=*/1, count, type);
  }
  if (count == 0) return;
  if (comm.size() == 1) {  // the sum of one rank: its own values
    if (stages) {
      stages->fill(0, count);
      stages->drain(0, count);
    }
    return;
  }
  try {
    if (stages) {
      reduceStaged(comm, data, count, type, *stages);
    } else {
      reduce(comm, data, count, type);
    }
  } catch (const MismatchError& e) {
    comm.postError(e.what());
    throw;
  }
}

void Allreduce::reduceStaged(Communicator& comm, void* data, size_t count, DataType type,
                             AllreduceStages& stages) {
  stages.fill(0, count);
  reduce(comm, data, count, type);
  stages.drain(0, count);
}

std::unique_ptr<Allreduce> makeAllreduce(const std::string& name, AllreduceOptions options) {
  if (name == "ring") return std::make_unique<RingAllreduce>(options);
  if (name == "halving_doubling") return std::make_unique<HalvingDoublingAllreduce>(options);
  if (name == "recursive_doubling") return std::make_unique<RecursiveDoublingAllreduce>(options);
  if (name == "shm") return std::make_unique<SharedMemoryAllreduce>(options);
  if (name == "hierarchical") return std::make_unique<HierarchicalAllreduce>(options);
  if (name == "mpi") return std::make_unique<MpiAllreduce>(options);
  if (name == "auto") return std::make_unique<AutoAllreduce>(options, defaultAllreduceTable());
  BIGBATCH_THROW(InvalidArgument,
                 "unknown allreduce algorithm '{}'; choose auto, ring, halving_doubling, "
                 "recursive_doubling, shm, hierarchical or mpi",
                 name);
}

std::vector<std::string> allreduceNames() {
  return {"ring", "halving_doubling", "recursive_doubling", "shm", "hierarchical", "mpi"};
}

void allreduceMaxInt64(Communicator& comm, int64_t* values, size_t count, int tag) {
  recursiveDoubling(comm, values, count * sizeof(int64_t), tag, [&](void* dst, const void* src) {
    auto* d = static_cast<int64_t*>(dst);
    const auto* s = static_cast<const int64_t*>(src);
    for (size_t i = 0; i < count; ++i) d[i] = std::max(d[i], s[i]);
  });
}

void checkSameSignature(Communicator& comm, int64_t operation, size_t count, DataType type) {
  const int64_t mine[3] = {operation, static_cast<int64_t>(count), static_cast<int64_t>(type)};
  // max(x) == -max(-x) = min(x) exactly when every rank holds the same x.
  int64_t v[6] = {mine[0], mine[1], mine[2], -mine[0], -mine[1], -mine[2]};
  allreduceMaxInt64(comm, v, 6, kSignatureTag);
  if (v[0] != -v[3] || v[1] != -v[4] || v[2] != -v[5]) {
    BIGBATCH_THROW(MismatchError,
                   "ranks called a collective with different arguments: this rank passed "
                   "operation {}, {} elements of {}; across ranks operation spans [{}, {}], count "
                   "[{}, {}], type [{}, {}]; every rank must pass the same count and type",
                   mine[0], mine[1], dataTypeName(type), -v[3], v[0], -v[4], v[1],
                   dataTypeName(static_cast<DataType>(-v[5])),
                   dataTypeName(static_cast<DataType>(v[2])));
  }
}

}  // namespace bigbatch
