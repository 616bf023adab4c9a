// retryInHalves: a batched call that failed, tried again on each half of
// its items, down to single items, which go to a per-item path — what the
// GPU decoder does when nvJPEG's batched decode fails for the batch
// (src/data/cuda/nvjpeg_batch_decoder.cpp). One bad item among n then costs
// about 2 log2(n) more batched calls and one per-item call, where sending
// every item to the per-item path (with a stream wait each, there) would
// cost n. Header-only and free of CUDA so that the CPU build tests it
// (tests/data/halving_retry_test.cpp). Threading: the caller's.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace bigbatch::data_detail {

// `batch(items)` returns "" when it succeeded for all of them, else why it
// failed; `single(item, why)` takes an item whose batch of one failed.
// Items keep their order; each reaches `single` at most once.
template <typename Batch, typename Single>
void retryInHalves(const std::vector<size_t>& items, const Batch& batch, const Single& single) {
  if (items.empty()) return;
  const std::string why = batch(items);
  if (why.empty()) return;
  if (items.size() == 1) {
    single(items[0], why);
    return;
  }
  const auto middle = items.begin() + static_cast<std::ptrdiff_t>(items.size() / 2);
  retryInHalves(std::vector<size_t>(items.begin(), middle), batch, single);
  retryInHalves(std::vector<size_t>(middle, items.end()), batch, single);
}

}  // namespace bigbatch::data_detail
