#include "shared_memory_allgather.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "bigbatch/collectives/algorithms.h"
#include "bigbatch/collectives/collectives.h"
#include "shm_sync.h"

namespace bigbatch {

void sharedMemoryAllgather(Communicator& comm, void* data, size_t count, DataType type,
                           size_t chunkBytes) {
  const int n = comm.size();
  const int me = comm.rank();
  if (n == 1 || count == 0) return;
  const size_t elem = elementSize(type);
  const size_t chunkElems = SharedMemoryAllreduce::chunkElements(chunkBytes, type);
  const size_t stageBytes = chunkElems * elem;
  // The same name and size as SharedMemoryAllreduce: one segment, one counter.
  SharedSegment& seg = comm.sharedSegment("shm_allreduce", kShmControlBytes + 2 * stageBytes);
  auto* bytes = static_cast<uint8_t*>(data);
  auto blockBegin = [&](int r) { return chunkBegin(count, n, r); };
  auto blockLen = [&](int r) { return blockBegin(r + 1) - blockBegin(r); };
  size_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, blockLen(r));
  uint64_t step = shmLoad(shmCounter(seg, me));

  for (size_t off = 0; off < longest; off += chunkElems) {
    const size_t buffer = (step / 2) % 2;
    auto stage = [&](int r) { return seg.slot(r) + kShmControlBytes + buffer * stageBytes; };
    auto pieceLen = [&](int r) {
      return blockLen(r) > off ? std::min(chunkElems, blockLen(r) - off) : size_t{0};
    };
    std::memcpy(stage(me), bytes + (blockBegin(me) + off) * elem, pieceLen(me) * elem);
    shmArrive(seg, me, ++step);
    shmWaitAll(comm, seg, step, "shared-memory allgather");
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      std::memcpy(bytes + (blockBegin(r) + off) * elem, stage(r), pieceLen(r) * elem);
    }
    shmArrive(seg, me, ++step);  // done reading this buffer
  }
}

}  // namespace bigbatch
