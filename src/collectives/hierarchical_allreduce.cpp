#include "bigbatch/collectives/algorithms.h"
#include "bigbatch/collectives/collectives.h"
#include "shared_memory_blocks.h"

namespace bigbatch {

void HierarchicalAllreduce::reduce(Communicator& comm, void* data, size_t count, DataType type) {
  AllreduceOptions inner = options_;
  inner.checkSignature = false;  // run() already checked the whole call
  Communicator& host = comm.hostComm();
  Communicator& cross = comm.crossHostComm();
  const bool uniform = comm.uniformHosts();  // collective on first use: every rank calls it

  // (1) Sum inside the host through shared memory: all of it where one
  // host is all (done then) or where the leader alone crosses hosts; with
  // equal ranks per host each local rank needs only its own block's sum.
  const bool oneHost = comm.localSize() == comm.size();
  if (oneHost || !uniform) {
    SharedMemoryAllreduce(inner).run(host, data, count, type);
    if (oneHost) return;
  } else {
    sharedMemoryReduceScatter(host, data, count, type, options_.shmChunkBytes);
  }

  // (2) Across hosts: rings for large blocks, recursive doubling for small ones.
  const size_t elem = elementSize(type);
  auto interHost = [&](size_t elems) -> std::unique_ptr<Allreduce> {
    // (256 KiB on every transport where no segment is named, whatever the
    // transport's own segment)
    const size_t ringFrom =
        options_.segmentBytes ? options_.segmentBytes : Communicator::kDefaultSegmentBytes;
    if (elems * elem >= ringFrom) return std::make_unique<RingAllreduce>(inner);
    return std::make_unique<RecursiveDoublingAllreduce>(inner);
  };
  auto* bytes = static_cast<uint8_t*>(data);
  if (uniform) {
    const int l = host.rank(), L = host.size();
    const size_t lo = chunkBegin(count, L, l), hi = chunkBegin(count, L, l + 1);
    interHost(hi - lo)->run(cross, bytes + lo * elem, hi - lo, type);
    // (3) Every local rank brings its block home, through shared memory.
    sharedMemoryAllgather(host, data, count, type, options_.shmChunkBytes);
  } else {
    if (host.rank() == 0) interHost(count)->run(cross, data, count, type);
    broadcast(host, data, count * elem, 0);
  }
}

}  // namespace bigbatch
