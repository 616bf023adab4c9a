#include <algorithm>
#include <deque>
#include <memory>

#include "bigbatch/collectives/algorithms.h"
#include "bigbatch/collectives/collectives.h"
#include "fold.h"
#include "ring_in_flight.h"
#include "shared_memory_blocks.h"

namespace bigbatch {
namespace {

// Each piece costs its in-host waits and 2(h-1) messages whatever its size.
constexpr size_t kMaxPieces = 1024;
// Rings in flight at once: the one on the link and the next, posted behind
// it so the link never waits for the memory phases. Tags cycle over twice
// as many: piece p + 4 reuses piece p's tag, and a rank starts it only after
// finishing piece p + 2, which its ring peers post only after finishing
// piece p — no message of piece p is unmatched by then.
constexpr size_t kInFlight = 2;

// Phases (1)-(3) piece by piece over equal ranks per host:
//   RS(0) post(0) RS(1) post(1) finish(0) AG(0) RS(2) post(2) finish(1) AG(1) ...
// The same order on every rank, and every wait (the shared-memory ones
// through `progress`, finish() through the transport's own progress) keeps
// the rings in flight moving: a rank waiting on piece p needs from its
// peers only what they post before they wait on anything after p.
//
// With `stages`, each piece is filled just before its reduce-scatter and
// drained just after its allgather, while the rings of its neighbours are
// in flight; the rings are polled after each (MPI's TCP rendezvous moves
// only while a rank polls).
void pipelinedHierarchical(Communicator& host, Communicator& cross, uint8_t* data, size_t count,
                           DataType type, size_t pieces, size_t shmChunkBytes,
                           AllreduceStages* stages) {
  const size_t elem = elementSize(type);
  const int l = host.rank(), L = host.size();
  auto pieceBegin = [&](size_t p) {
    return chunkBegin(count, static_cast<int>(pieces), static_cast<int>(p));
  };
  struct Piece {
    size_t begin, count;
    std::unique_ptr<RingInFlight> ring;
  };
  std::deque<Piece> inFlight;
  const ShmProgress progress = [&] {
    for (Piece& p : inFlight) p.ring->progress();
  };
  auto bringHome = [&] {
    inFlight.front().ring->finish();
    Piece done = std::move(inFlight.front());
    inFlight.pop_front();
    sharedMemoryAllgather(host, data + done.begin * elem, done.count, type, shmChunkBytes,
                          progress);
    if (stages) {
      stages->drain(done.begin, done.begin + done.count);
      progress();
    }
  };
  for (size_t p = 0; p < pieces; ++p) {
    const size_t begin = pieceBegin(p), n = pieceBegin(p + 1) - begin;
    uint8_t* at = data + begin * elem;
    if (stages) {
      stages->fill(begin, begin + n);
      progress();
    }
    sharedMemoryReduceScatter(host, at, n, type, shmChunkBytes, progress);
    const size_t lo = chunkBegin(n, L, l), hi = chunkBegin(n, L, l + 1);
    inFlight.push_back(
        {begin, n,
         std::make_unique<RingInFlight>(cross, at + lo * elem, hi - lo, type,
                                        kPipelineTag + static_cast<int>(p % (2 * kInFlight)))});
    if (inFlight.size() == kInFlight) bringHome();
  }
  while (!inFlight.empty()) bringHome();
}

}  // namespace

void HierarchicalAllreduce::reduce(Communicator& comm, void* data, size_t count, DataType type) {
  reduceIn(comm, data, count, type, nullptr);
}

void HierarchicalAllreduce::reduceStaged(Communicator& comm, void* data, size_t count,
                                         DataType type, AllreduceStages& stages) {
  reduceIn(comm, data, count, type, &stages);
}

void HierarchicalAllreduce::reduceIn(Communicator& comm, void* data, size_t count, DataType type,
                                     AllreduceStages* stages) {
  Communicator& host = comm.hostComm();
  Communicator& cross = comm.crossHostComm();
  const bool uniform = comm.uniformHosts();  // collective on first use: every rank calls it
  const bool oneHost = comm.localSize() == comm.size();
  const size_t elem = elementSize(type);
  auto* bytes = static_cast<uint8_t*>(data);

  // Auto: each ring message one segment of the inter-host transport —
  // larger ones took longer a byte here (MPI's TCP rendezvous moves on only
  // while a rank polls), smaller pieces cost more in-host waits than they
  // hide (docs/BENCHMARKS.md, "Horovod as the peer", the pipeline's paragraph).
  const size_t pieceBytes =
      options_.pipelineBytes != AllreduceOptions::kPipelineAuto
          ? options_.pipelineBytes
          : (options_.segmentBytes ? options_.segmentBytes : cross.segmentBytes()) *
                static_cast<size_t>(comm.size());
  // floor(bytes / piece): a piece is 1-2x pieceBytes (more past kMaxPieces
  // pieces), and never empty.
  const size_t pieces =
      pieceBytes ? std::min({kMaxPieces, count, count * elem / pieceBytes}) : size_t{1};
  // pollsRequests() is the same on every rank: one transport for the job.
  if (!oneHost && uniform && pieces >= 2 && cross.pollsRequests()) {
    pipelinedHierarchical(host, cross, bytes, count, type, pieces, options_.shmChunkBytes, stages);
    return;
  }
  if (stages) stages->fill(0, count);
  onePiece(host, cross, data, count, type, uniform, oneHost);
  if (stages) stages->drain(0, count);
}

void HierarchicalAllreduce::onePiece(Communicator& host, Communicator& cross, void* data,
                                     size_t count, DataType type, bool uniform, bool oneHost) {
  AllreduceOptions inner = options_;
  inner.checkSignature = false;  // run() already checked the whole call
  const size_t elem = elementSize(type);
  auto* bytes = static_cast<uint8_t*>(data);

  // (1) Sum inside the host through shared memory: all of it where one
  // host is all (done then) or where the leader alone crosses hosts; with
  // equal ranks per host each local rank needs only its own block's sum.
  if (oneHost || !uniform) {
    SharedMemoryAllreduce(inner).run(host, data, count, type);
    if (oneHost) return;
  } else {
    sharedMemoryReduceScatter(host, data, count, type, options_.shmChunkBytes);
  }

  // (2) Across hosts: rings for large blocks, recursive doubling for small ones.
  auto interHost = [&](size_t elems) -> std::unique_ptr<Allreduce> {
    // (256 KiB on every transport where no segment is named, whatever the
    // transport's own segment)
    const size_t ringFrom =
        options_.segmentBytes ? options_.segmentBytes : Communicator::kDefaultSegmentBytes;
    if (elems * elem >= ringFrom) return std::make_unique<RingAllreduce>(inner);
    return std::make_unique<RecursiveDoublingAllreduce>(inner);
  };
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
