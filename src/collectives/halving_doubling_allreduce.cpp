#include <memory>
#include <vector>

#include "bigbatch/collectives/algorithms.h"
#include "fold.h"

namespace bigbatch {

void HalvingDoublingAllreduce::reduce(Communicator& comm, void* data, size_t count,
                                      DataType type) {
  const size_t elem = elementSize(type);
  const size_t total = count * elem;
  auto* bytes = static_cast<uint8_t*>(data);
  const Fold f = makeFold(comm.rank(), comm.size());
  // The whole buffer where this rank receives a fold, else the larger half,
  // ceil(count / 2) elements (the largest block the halving receives).
  const bool folds = comm.rank() < 2 * f.rem && f.newRank >= 0;
  const std::unique_ptr<uint8_t[]> tmp =
      receiveBuffer(folds ? total : (count - count / 2) * elem);
  auto combineAll = [&](void* dst, const void* src) { sumInto(type, dst, src, count); };
  foldIn(comm, f, data, total, tmp.get(), combineAll);
  if (f.newRank >= 0) {
    // Recursive halving: keep the half of [lo, hi) on this rank's side of the
    // partner bit, send the other half, add the partner's copy of ours.
    struct Range {
      size_t lo, hi;
    };
    std::vector<Range> kept;
    size_t lo = 0, hi = count;
    for (int mask = f.p / 2; mask >= 1; mask /= 2) {
      const int peer = f.realRank(f.newRank ^ mask);
      const size_t mid = lo + (hi - lo) / 2;
      const bool lower = (f.newRank & mask) == 0;
      const size_t keepLo = lower ? lo : mid, keepHi = lower ? mid : hi;
      const size_t sendLo = lower ? mid : lo, sendHi = lower ? hi : mid;
      comm.sendrecv(bytes + sendLo * elem, (sendHi - sendLo) * elem, peer, tmp.get(),
                    (keepHi - keepLo) * elem, peer, kHalvingTag);
      sumInto(type, bytes + keepLo * elem, tmp.get(), keepHi - keepLo);
      kept.push_back({lo, hi});
      lo = keepLo;
      hi = keepHi;
    }
    // Recursive doubling: undo the halving, exchanging the summed blocks.
    for (int mask = 1; mask < f.p; mask *= 2) {
      const int peer = f.realRank(f.newRank ^ mask);
      const Range parent = kept.back();
      kept.pop_back();
      const size_t mid = parent.lo + (parent.hi - parent.lo) / 2;
      const bool lower = (f.newRank & mask) == 0;
      const size_t otherLo = lower ? mid : parent.lo, otherHi = lower ? parent.hi : mid;
      comm.sendrecv(bytes + lo * elem, (hi - lo) * elem, peer, bytes + otherLo * elem,
                    (otherHi - otherLo) * elem, peer, kHalvingTag);
      lo = parent.lo;
      hi = parent.hi;
    }
  }
  foldOut(comm, f, data, total);
}

void RecursiveDoublingAllreduce::reduce(Communicator& comm, void* data, size_t count,
                                        DataType type) {
  recursiveDoubling(comm, data, count * elementSize(type), kDoublingTag,
                    [&](void* dst, const void* src) { sumInto(type, dst, src, count); });
}

}  // namespace bigbatch
