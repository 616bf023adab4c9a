#include "shared_memory_reduce_scatter.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bigbatch/collectives/algorithms.h"
#include "bigbatch/collectives/collectives.h"
#include "shm_sync.h"

namespace bigbatch {

void sharedMemoryReduceScatter(Communicator& comm, void* data, size_t count, DataType type,
                               size_t chunkBytes) {
  const int n = comm.size();
  const int me = comm.rank();
  if (n == 1 || count == 0) return;
  const size_t elem = elementSize(type);
  const size_t chunkElems = SharedMemoryAllreduce::chunkElements(chunkBytes, type);
  const size_t stageBytes = chunkElems * elem;
  // A piece per destination rank; a multiple of 64 elements where the chunk
  // allows, to keep the pieces off each other's cache lines.
  const size_t share = chunkElems / static_cast<size_t>(n);
  const size_t pieceElems = share >= 64 ? share / 64 * 64 : std::max<size_t>(1, share);
  // The same name and size as SharedMemoryAllreduce: one segment, one counter.
  SharedSegment& seg = comm.sharedSegment("shm_allreduce", kShmControlBytes + 2 * stageBytes);
  auto* bytes = static_cast<uint8_t*>(data);
  auto blockBegin = [&](int r) { return chunkBegin(count, n, r); };
  auto blockLen = [&](int r) { return blockBegin(r + 1) - blockBegin(r); };
  size_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, blockLen(r));
  uint64_t step = shmLoad(shmCounter(seg, me));
  std::vector<const void*> srcs(n);

  for (size_t off = 0; off < longest; off += pieceElems) {
    const size_t buffer = (step / 2) % 2;
    auto piece = [&](int owner, int dest) {  // `owner`'s staged piece for `dest`
      return seg.slot(owner) + kShmControlBytes + buffer * stageBytes + dest * pieceElems * elem;
    };
    auto pieceLen = [&](int r) {
      return blockLen(r) > off ? std::min(pieceElems, blockLen(r) - off) : size_t{0};
    };
    for (int r = 0; r < n; ++r) {
      if (r != me) std::memcpy(piece(me, r), bytes + (blockBegin(r) + off) * elem, pieceLen(r) * elem);
    }
    shmArrive(seg, me, ++step);
    shmWaitAll(comm, seg, step, "shared-memory reduce-scatter");
    // Summed into this rank's own (otherwise unused) piece, then copied
    // home: sumMany's destination may not alias a source.
    uint8_t* mine = bytes + (blockBegin(me) + off) * elem;
    for (int r = 0; r < n; ++r) srcs[r] = r == me ? mine : piece(r, me);
    if (const size_t len = pieceLen(me); len > 0) {
      sumMany(type, piece(me, me), srcs.data(), n, len);
      std::memcpy(mine, piece(me, me), len * elem);
    }
    shmArrive(seg, me, ++step);  // done reading this buffer
  }
}

}  // namespace bigbatch
