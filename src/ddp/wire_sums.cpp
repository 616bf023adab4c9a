#include "wire_sums.h"

#include "bigbatch/collectives/collectives.h"

namespace bigbatch::ddp_detail {

void ReduceScatterWire::sum(void* data, size_t count, DataType type) {
  reduceScatter(comm_, data, count, type, /*checkSignature=*/false);
}

std::pair<size_t, size_t> ReduceScatterWire::kept(size_t count) const {
  return {chunkBegin(count, comm_.size(), comm_.rank()),
          chunkBegin(count, comm_.size(), comm_.rank() + 1)};
}

}  // namespace bigbatch::ddp_detail
