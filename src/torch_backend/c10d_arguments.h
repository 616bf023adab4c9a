// The arguments of c10d's calls as the bigbatch backend reads them: the
// reduce operation, the one tensor of a call's list, and all_to_all_single's
// row splits. Each refusal is an InvalidArgument naming the fix, raised on
// the caller's thread before anything is queued.
//
// Header only; no state.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "bigbatch/common/error.h"
#include "tensor_collectives.h"
#include "torch_api.h"

namespace bigbatch::torch_backend {

inline ReduceKind reduceKindOf(const ::c10d::ReduceOp& op, const char* collective) {
  switch (static_cast<::c10d::ReduceOp::RedOpType>(op)) {
    case ::c10d::ReduceOp::SUM: return ReduceKind::kSum;
    case ::c10d::ReduceOp::AVG: return ReduceKind::kAvg;
    case ::c10d::ReduceOp::MAX: return ReduceKind::kMax;
    case ::c10d::ReduceOp::MIN: return ReduceKind::kMin;
    case ::c10d::ReduceOp::PRODUCT: return ReduceKind::kProduct;
    default:
      BIGBATCH_THROW(InvalidArgument,
                     "{} with ReduceOp {}: the bigbatch backend reduces with SUM, AVG, MAX, MIN "
                     "and PRODUCT; use one of those (or backend \"gloo\" for bitwise ops)",
                     collective, static_cast<int>(static_cast<::c10d::ReduceOp::RedOpType>(op)));
  }
}

// A rooted collective's root: a rank of the group. `what`: "gather to".
inline void checkRoot(int root, int ranks, const char* what) {
  BIGBATCH_REQUIRE(root >= 0 && root < ranks, InvalidArgument,
                   "{} rank {}: the group has ranks 0..{}", what, root, ranks - 1);
}

// c10d passes lists; the backend takes one tensor per call (one device per
// process, as gloo's CPU path).
inline const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* op) {
  BIGBATCH_REQUIRE(tensors.size() == 1, InvalidArgument,
                   "{} of {} tensors in one call: the bigbatch backend takes one tensor per call "
                   "(one per process); pass a list of one",
                   op, tensors.size());
  return tensors[0];
}

// `t`'s rows split by `sizes` (empty: `parts` equal parts), as views.
inline std::vector<at::Tensor> splitRows(const at::Tensor& t, const std::vector<int64_t>& sizes,
                                  int parts, const char* side) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  std::vector<at::Tensor> out;
  if (sizes.empty()) {
    BIGBATCH_REQUIRE(rows % parts == 0, InvalidArgument,
                     "all_to_all_single: the {} has {} row(s), not a multiple of the {} rank(s); "
                     "pass {}_split_sizes",
                     side, rows, parts, side);
    for (int r = 0; r < parts; ++r) out.push_back(t.narrow(0, r * (rows / parts), rows / parts));
    return out;
  }
  BIGBATCH_REQUIRE(static_cast<int>(sizes.size()) == parts, InvalidArgument,
                   "all_to_all_single: {} {} split size(s) on a group of {} rank(s): give one "
                   "per rank",
                   sizes.size(), side, parts);
  int64_t offset = 0;
  for (const int64_t n : sizes) {
    BIGBATCH_REQUIRE(n >= 0 && offset + n <= rows, InvalidArgument,
                     "all_to_all_single: the {} split sizes add up past its {} row(s)", side, rows);
    out.push_back(t.narrow(0, offset, n));
    offset += n;
  }
  BIGBATCH_REQUIRE(offset == rows, InvalidArgument,
                   "all_to_all_single: the {} split sizes add up to {} of its {} row(s)", side,
                   offset, rows);
  return out;
}

}  // namespace bigbatch::torch_backend
