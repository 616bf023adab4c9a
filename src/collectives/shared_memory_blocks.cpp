#include "shared_memory_blocks.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bigbatch/collectives/algorithms.h"
#include "bigbatch/collectives/collectives.h"
#include "bigbatch/common/error.h"
#include "shm_sync.h"

namespace bigbatch {
namespace {

// One call's view of the staging segment and of the ranks' blocks.
struct BlockStaging {
  BlockStaging(Communicator& comm, size_t count, DataType type, size_t chunkBytes)
      : n(comm.size()),
        me(comm.rank()),
        count(count),
        elem(elementSize(type)),
        chunkElems(SharedMemoryAllreduce::chunkElements(chunkBytes, type)),
        stageBytes(chunkElems * elem),
        // The same name and size as SharedMemoryAllreduce: one segment, one counter.
        seg(comm.sharedSegment("shm_allreduce", kShmControlBytes + 2 * stageBytes)),
        step(shmLoad(shmCounter(seg, me))) {
    for (int r = 0; r < n; ++r) longest = std::max(longest, blockLen(r));
  }
  size_t blockBegin(int r) const { return chunkBegin(count, n, r); }
  size_t blockLen(int r) const { return blockBegin(r + 1) - blockBegin(r); }
  // Elements of rank r's block from `off`, at most `most`.
  size_t pieceLen(int r, size_t off, size_t most) const {
    return blockLen(r) > off ? std::min(most, blockLen(r) - off) : size_t{0};
  }
  // Which of the two staging buffers the next chunk uses: alternating by
  // the chunk's number, step / 2, as SharedMemoryAllreduce's.
  size_t nextBuffer() const { return (step / 2) % 2; }
  uint8_t* buffer(int owner, size_t which) const {
    return seg.slot(owner) + kShmControlBytes + which * stageBytes;
  }

  const int n, me;
  const size_t count, elem, chunkElems, stageBytes;
  SharedSegment& seg;
  uint64_t step;
  size_t longest = 0;
};

}  // namespace

void sharedMemoryReduceScatter(Communicator& comm, void* data, size_t count, DataType type,
                               size_t chunkBytes, const ShmProgress& progress) {
  if (comm.size() == 1 || count == 0) return;
  BlockStaging s(comm, count, type, chunkBytes);
  BIGBATCH_REQUIRE(static_cast<size_t>(s.n) <= s.chunkElems, InvalidArgument,
                   "the shared-memory reduce-scatter of {} ranks on a host needs a staging chunk "
                   "of at least {} elements; this one holds {}: raise the chunk (--chunk-bytes)",
                   s.n, s.n, s.chunkElems);
  // A piece per destination rank; a multiple of 64 elements where the chunk
  // allows, to keep the pieces off each other's cache lines.
  const size_t share = s.chunkElems / static_cast<size_t>(s.n);
  const size_t pieceElems = share >= 64 ? share / 64 * 64 : std::max<size_t>(1, share);
  auto* bytes = static_cast<uint8_t*>(data);
  std::vector<const void*> srcs(s.n);

  for (size_t off = 0; off < s.longest; off += pieceElems) {
    const size_t which = s.nextBuffer();
    auto piece = [&](int owner, int dest) {  // `owner`'s staged piece for `dest`
      return s.buffer(owner, which) + dest * pieceElems * s.elem;
    };
    for (int r = 0; r < s.n; ++r) {
      if (r == s.me) continue;
      std::memcpy(piece(s.me, r), bytes + (s.blockBegin(r) + off) * s.elem,
                  s.pieceLen(r, off, pieceElems) * s.elem);
    }
    shmArrive(s.seg, s.me, ++s.step);
    shmWaitAll(comm, s.seg, s.step, "shared-memory reduce-scatter", progress);
    // Summed into this rank's own (otherwise unused) piece, then copied
    // home: sumMany's destination may not alias a source.
    uint8_t* mine = bytes + (s.blockBegin(s.me) + off) * s.elem;
    for (int r = 0; r < s.n; ++r) srcs[r] = r == s.me ? mine : piece(r, s.me);
    if (const size_t len = s.pieceLen(s.me, off, pieceElems); len > 0) {
      sumMany(type, piece(s.me, s.me), srcs.data(), s.n, len);
      std::memcpy(mine, piece(s.me, s.me), len * s.elem);
    }
    shmArrive(s.seg, s.me, ++s.step);  // done reading this buffer
  }
}

void sharedMemoryAllgather(Communicator& comm, void* data, size_t count, DataType type,
                           size_t chunkBytes, const ShmProgress& progress) {
  if (comm.size() == 1 || count == 0) return;
  BlockStaging s(comm, count, type, chunkBytes);
  auto* bytes = static_cast<uint8_t*>(data);

  for (size_t off = 0; off < s.longest; off += s.chunkElems) {
    const size_t which = s.nextBuffer();
    std::memcpy(s.buffer(s.me, which), bytes + (s.blockBegin(s.me) + off) * s.elem,
                s.pieceLen(s.me, off, s.chunkElems) * s.elem);
    shmArrive(s.seg, s.me, ++s.step);
    shmWaitAll(comm, s.seg, s.step, "shared-memory allgather", progress);
    for (int r = 0; r < s.n; ++r) {
      if (r == s.me) continue;
      std::memcpy(bytes + (s.blockBegin(r) + off) * s.elem, s.buffer(r, which),
                  s.pieceLen(r, off, s.chunkElems) * s.elem);
    }
    shmArrive(s.seg, s.me, ++s.step);  // done reading this buffer
  }
}

}  // namespace bigbatch
