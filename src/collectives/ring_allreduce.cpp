#include <algorithm>
#include <vector>

#include "bigbatch/collectives/algorithms.h"
#include "fold.h"
#include "ring_pass.h"

namespace bigbatch {

void ringPass(Communicator& comm, void* data, size_t count, DataType type, size_t segmentBytes,
              bool reduceStep, int shift, int tag) {
  const int n = comm.size();
  if (n == 1) return;
  const int rank = comm.rank();
  const int right = (rank + 1) % n, left = (rank - 1 + n) % n;
  const size_t elem = elementSize(type);
  auto* bytes = static_cast<uint8_t*>(data);
  auto begin = [&](int c) { return ringChunkBegin(count, n, c); };
  const size_t segElems = std::max<size_t>(1, segmentBytes / elem);
  std::unique_ptr<uint8_t[]> recvBuf[2];
  if (reduceStep) {
    const size_t maxChunk = (count + n - 1) / n;
    const size_t bufElems = std::min(segElems, maxChunk);
    recvBuf[0] = receiveBuffer(bufElems * elem);
    recvBuf[1] = receiveBuffer(bufElems * elem);
  }
  auto mod = [n](int c) { return ((c % n) + n) % n; };
  for (int s = 0; s < n - 1; ++s) {
    const int sendChunk = mod(rank - s + shift), recvChunk = mod(rank - s - 1 + shift);
    const size_t sendBegin = begin(sendChunk), sendCount = begin(sendChunk + 1) - sendBegin;
    const size_t recvBegin = begin(recvChunk), recvCount = begin(recvChunk + 1) - recvBegin;
    // Messages per chunk depend on that chunk alone, so the sender's and the
    // receiver's counts agree (an empty chunk still sends one empty message).
    auto segmentsOf = [&](size_t m) { return std::max<size_t>(1, (m + segElems - 1) / segElems); };
    const size_t sendSegments = segmentsOf(sendCount), recvSegments = segmentsOf(recvCount);
    auto segRange = [&](size_t total, size_t k) {
      const size_t lo = std::min(total, k * segElems);
      return std::make_pair(lo, std::min(total, lo + segElems) - lo);
    };
    auto postRecv = [&](size_t k) -> std::unique_ptr<Request> {
      if (k >= recvSegments) return nullptr;
      auto [lo, len] = segRange(recvCount, k);
      void* dst = reduceStep ? recvBuf[k % 2].get() : bytes + (recvBegin + lo) * elem;
      return comm.irecv(dst, len * elem, left, tag);
    };
    std::unique_ptr<Request> pending = postRecv(0);
    for (size_t k = 0; k < std::max(sendSegments, recvSegments); ++k) {
      std::unique_ptr<Request> next = postRecv(k + 1);
      std::unique_ptr<Request> send;
      if (k < sendSegments) {
        auto [slo, slen] = segRange(sendCount, k);
        send = comm.isend(bytes + (sendBegin + slo) * elem, slen * elem, right, tag);
      }
      if (pending) {
        pending->wait();
        if (reduceStep) {
          auto [rlo, rlen] = segRange(recvCount, k);
          sumInto(type, bytes + (recvBegin + rlo) * elem, recvBuf[k % 2].get(), rlen);
        }
      }
      if (send) send->wait();
      pending = std::move(next);
    }
  }
}

void RingAllreduce::reduce(Communicator& comm, void* data, size_t count, DataType type) {
  // Reduce-scatter with shift -1 leaves rank i with the sum of chunk i; the
  // allgather (shift 0) starts by sending that chunk.
  const size_t segment = options_.segmentBytes ? options_.segmentBytes : comm.segmentBytes();
  ringPass(comm, data, count, type, segment, /*reduce=*/true, -1, kRingTag);
  ringPass(comm, data, count, type, segment, /*reduce=*/false, 0, kRingTag);
}

}  // namespace bigbatch
