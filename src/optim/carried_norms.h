// CarriedNorms: each weight tensor's squared norm as the last fused update
// wrote it, so the next step's norm pass need not read the weights again.
//
// Why: LARS needs |w| of every layer before it may update any of it. On a
// CPU the update pass writes w anyway, so summing the new values there costs
// no memory traffic, and the next norm pass reads only the gradients: 24
// bytes per value per step instead of 28 (read g; then read w, g, v and write
// w, v). The cache-friendly per-tensor loop (five ATen calls per tensor, each
// tensor hot in cache between them) also moves ~28 bytes per value from
// DRAM, so this saving is what the fused step has over it on large tensors.
//
// Validity: an entry holds while the tensor's storage pointer and autograd
// version counter are what they were when it was stored. Every ATen in-place
// operation (copy_ from a checkpoint, mul_, set_data) bumps the version or
// moves the storage; the fused update writes through raw pointers and bumps
// nothing, which is exactly the write the carried norm describes. The
// carried value is summed in the same lanes and chunk order as a fresh norm
// pass (multi_tensor.h), so using it never changes a result by a bit.
//
// Not thread-safe: owned by one optimizer, used by its step().
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace bigbatch::optim_detail {

class CarriedNorms {
 public:
  explicit CarriedNorms(size_t tensors) : entries_(tensors) {}

  // The carried |w|² of tensor t, if it still describes `w`.
  bool valid(size_t t, const torch::Tensor& w) const {
    const Entry& e = entries_[t];
    return e.set && e.data == w.data_ptr() && e.version == w._version();
  }
  double normSq(size_t t) const { return entries_[t].normSq; }

  void store(size_t t, const torch::Tensor& w, double normSq) {
    entries_[t] = {true, w.data_ptr(), w._version(), normSq};
  }
  void forget(size_t t) { entries_[t].set = false; }

 private:
  struct Entry {
    bool set = false;
    const void* data = nullptr;
    int64_t version = 0;
    double normSq = 0;
  };
  std::vector<Entry> entries_;
};

}  // namespace bigbatch::optim_detail
