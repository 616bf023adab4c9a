#include "bigbatch/collectives/collectives.h"

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/common/error.h"
#include "fold.h"
#include "ring_pass.h"

namespace bigbatch {
namespace {

// Re-raises a mismatch after telling the peers, as Allreduce::run does.
template <typename Fn>
void guarded(Communicator& comm, Fn&& fn) {
  try {
    fn();
  } catch (const MismatchError& e) {
    comm.postError(e.what());
    throw;
  }
}

}  // namespace

size_t chunkBegin(size_t count, int n, int c) { return ringChunkBegin(count, n, c); }

void broadcast(Communicator& comm, void* data, size_t bytes, int root) {
  const int n = comm.size();
  BIGBATCH_REQUIRE(root >= 0 && root < n, InvalidArgument, "broadcast root {} is outside 0..{}",
                   root, n - 1);
  if (n == 1) return;
  // The root is part of the signature: ranks that disagree on it fail too.
  checkSameSignature(comm, /*operation=*/2 + 16 * static_cast<int64_t>(root), bytes,
                     DataType::kUInt8);
  if (bytes == 0) return;
  guarded(comm, [&] {
    const int v = (comm.rank() - root + n) % n;  // rank relative to the root
    auto real = [&](int u) { return (u + root) % n; };
    int mask = 1;
    while (mask < n) {
      if (v & mask) {
        comm.recv(data, bytes, real(v - mask), kBroadcastTag);
        break;
      }
      mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1) {
      if (v + mask < n) comm.send(data, bytes, real(v + mask), kBroadcastTag);
    }
  });
}

void allgather(Communicator& comm, void* data, size_t count, DataType type, bool checkSignature) {
  if (comm.size() == 1) return;
  if (checkSignature) checkSameSignature(comm, /*operation=*/3, count, type);
  if (count == 0) return;
  guarded(comm, [&] {
    ringPass(comm, data, count, type, comm.segmentBytes(), /*reduce=*/false, /*shift=*/0,
             kGatherTag);
  });
}

void reduceScatter(Communicator& comm, void* data, size_t count, DataType type,
                   bool checkSignature) {
  if (comm.size() == 1) return;
  if (checkSignature) checkSameSignature(comm, /*operation=*/4, count, type);
  if (count == 0) return;
  guarded(comm, [&] {
    ringPass(comm, data, count, type, comm.segmentBytes(), /*reduce=*/true, /*shift=*/-1,
             kGatherTag);
  });
}

}  // namespace bigbatch
