#include <algorithm>
#include <cstring>
#include <vector>

#include "bigbatch/collectives/algorithms.h"
#include "shm_sync.h"

namespace bigbatch {

size_t SharedMemoryAllreduce::chunkElements(size_t chunkBytes, DataType type) {
  // Whole 512-byte units (64 elements of the widest type: every rank's slice
  // boundary stays off shared cache lines for small n), so that the staging
  // chunk has the same bytes for every element type: the double buffers then
  // lie at the same offsets in every call, and a call of one type never
  // writes where a peer still reads the previous call's buffer of another.
  const size_t bytes = std::max<size_t>(512, chunkBytes / 512 * 512);
  return bytes / elementSize(type);
}

void SharedMemoryAllreduce::reduce(Communicator& comm, void* data, size_t count, DataType type) {
  const int n = comm.size();
  const int me = comm.rank();
  const size_t elem = elementSize(type);
  const size_t chunkElems = chunkElements(options_.shmChunkBytes, type);
  const size_t stageBytes = chunkElems * elem;
  SharedSegment& seg = comm.sharedSegment("shm_allreduce", kShmControlBytes + 2 * stageBytes);
  auto* bytes = static_cast<uint8_t*>(data);
  uint64_t step = shmLoad(shmCounter(seg, me));
  std::vector<const void*> srcs(n);

  for (size_t start = 0; start < count; start += chunkElems) {
    const size_t len = std::min(chunkElems, count - start);
    // Alternate staging buffers by the global chunk number (step / 2), so a
    // peer still copying out of the previous chunk's buffer is never
    // overwritten, also across calls.
    const size_t buffer = (step / 2) % 2;
    auto stage = [&](int r) { return seg.slot(r) + kShmControlBytes + buffer * stageBytes; };
    uint8_t* chunk = bytes + start * elem;
    auto sliceBegin = [&](int r) { return len * static_cast<size_t>(r) / static_cast<size_t>(n); };
    const size_t lo = sliceBegin(me), hi = sliceBegin(me + 1);
    // Stage everything but this rank's own slice: only this rank reads that
    // part of its input, and it reads it from `chunk` directly.
    std::memcpy(stage(me), chunk, lo * elem);
    std::memcpy(stage(me) + hi * elem, chunk + hi * elem, (len - hi) * elem);
    shmArrive(seg, me, ++step);
    shmWaitAll(comm, seg, step, "shared-memory allreduce (stage)");

    // Reduce this rank's slice straight from every rank's staging buffer into
    // its own staging slot (where the peers will read it), then keep a copy.
    for (int r = 0; r < n; ++r) srcs[r] = (r == me ? chunk : stage(r)) + lo * elem;
    if (hi > lo) {
      sumMany(type, stage(me) + lo * elem, srcs.data(), n, hi - lo);
      std::memcpy(chunk + lo * elem, stage(me) + lo * elem, (hi - lo) * elem);
    }
    shmArrive(seg, me, ++step);
    shmWaitAll(comm, seg, step, "shared-memory allreduce (reduce)");

    // Gather the other ranks' reduced slices.
    for (int r = 0; r < n; ++r) {
      if (r == me) continue;
      const size_t rlo = sliceBegin(r), rhi = sliceBegin(r + 1);
      std::memcpy(chunk + rlo * elem, stage(r) + rlo * elem, (rhi - rlo) * elem);
    }
  }
}

}  // namespace bigbatch
