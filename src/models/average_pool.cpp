#include "bigbatch/models/average_pool.h"

#include <ATen/Context.h>

namespace bigbatch {
namespace {

// [out, in]: row i averages adaptive pooling's window i.
torch::Tensor poolingMatrix(int64_t in, int64_t out, const torch::TensorOptions& options) {
  auto m = torch::zeros({out, in}, torch::kDouble);
  auto a = m.accessor<double, 2>();
  for (int64_t i = 0; i < out; ++i) {
    const int64_t begin = (i * in) / out;
    const int64_t end = ((i + 1) * in + out - 1) / out;
    for (int64_t j = begin; j < end; ++j) a[i][j] = 1.0 / static_cast<double>(end - begin);
  }
  return m.to(options);
}

}  // namespace

torch::Tensor adaptiveAvgPool2dByMatrices(const torch::Tensor& x, int64_t outH, int64_t outW) {
  const int64_t h = x.size(-2), w = x.size(-1);
  if (outH == 1 && outW == 1) return x.mean({-2, -1}, /*keepdim=*/true);
  const auto options = x.options().memory_format(c10::nullopt);
  const torch::Tensor ph = poolingMatrix(h, outH, options);
  const torch::Tensor pw = poolingMatrix(w, outW, options);
  return torch::matmul(ph, torch::matmul(x, pw.t()));
}

torch::Tensor adaptiveAvgPool2d(const torch::Tensor& x, int64_t outH, int64_t outW) {
  if (x.is_cuda() && at::globalContext().deterministicAlgorithms()) {
    return adaptiveAvgPool2dByMatrices(x, outH, outW);
  }
  return torch::adaptive_avg_pool2d(x, {outH, outW});
}

}  // namespace bigbatch
