#include <algorithm>
#include <vector>

#include "bigbatch/collectives/algorithms.h"
#include "fold.h"

namespace bigbatch {

void RingAllreduce::reduce(Communicator& comm, void* data, size_t count, DataType type) {
  const int n = comm.size();
  const int rank = comm.rank();
  const int right = (rank + 1) % n, left = (rank - 1 + n) % n;
  const size_t elem = elementSize(type);
  auto* bytes = static_cast<uint8_t*>(data);
  // Chunk c holds elements [begin(c), begin(c + 1)): sizes differ by at most one.
  auto begin = [&](int c) { return count * static_cast<size_t>(c) / static_cast<size_t>(n); };
  const size_t segElems = std::max<size_t>(1, options_.segmentBytes / elem);
  std::vector<uint8_t> recvBuf[2];
  const size_t maxChunk = (count + n - 1) / n;
  const size_t bufElems = std::min(segElems, maxChunk);
  recvBuf[0].resize(bufElems * elem);
  recvBuf[1].resize(bufElems * elem);

  // One ring step: send chunk `sendChunk` right, receive chunk `recvChunk`
  // from the left, segment by segment; `reduceStep` adds, otherwise stores.
  auto step = [&](int sendChunk, int recvChunk, bool reduceStep) {
    const size_t sendBegin = begin(sendChunk), sendCount = begin(sendChunk + 1) - sendBegin;
    const size_t recvBegin = begin(recvChunk), recvCount = begin(recvChunk + 1) - recvBegin;
    // Messages per chunk depend on that chunk alone, so the sender's and the
    // receiver's counts agree (an empty chunk still sends one empty message).
    auto segmentsOf = [&](size_t n) { return std::max<size_t>(1, (n + segElems - 1) / segElems); };
    const size_t sendSegments = segmentsOf(sendCount), recvSegments = segmentsOf(recvCount);
    auto segRange = [&](size_t total, size_t k) {
      const size_t lo = std::min(total, k * segElems);
      return std::make_pair(lo, std::min(total, lo + segElems) - lo);
    };
    auto postRecv = [&](size_t k) -> std::unique_ptr<Request> {
      if (k >= recvSegments) return nullptr;
      auto [lo, len] = segRange(recvCount, k);
      void* dst = reduceStep ? recvBuf[k % 2].data() : bytes + (recvBegin + lo) * elem;
      return comm.irecv(dst, len * elem, left, kRingTag);
    };
    std::unique_ptr<Request> pending = postRecv(0);
    for (size_t k = 0; k < std::max(sendSegments, recvSegments); ++k) {
      std::unique_ptr<Request> next = postRecv(k + 1);
      std::unique_ptr<Request> send;
      if (k < sendSegments) {
        auto [slo, slen] = segRange(sendCount, k);
        send = comm.isend(bytes + (sendBegin + slo) * elem, slen * elem, right, kRingTag);
      }
      if (pending) {
        pending->wait();
        if (reduceStep) {
          auto [rlo, rlen] = segRange(recvCount, k);
          sumInto(type, bytes + (recvBegin + rlo) * elem, recvBuf[k % 2].data(), rlen);
        }
      }
      if (send) send->wait();
      pending = std::move(next);
    }
  };

  for (int s = 0; s < n - 1; ++s) {
    step((rank - s + 2 * n) % n, (rank - s - 1 + 2 * n) % n, /*reduceStep=*/true);
  }
  for (int s = 0; s < n - 1; ++s) {
    step((rank + 1 - s + 2 * n) % n, (rank - s + 2 * n) % n, /*reduceStep=*/false);
  }
}

}  // namespace bigbatch
