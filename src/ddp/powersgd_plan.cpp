#include "powersgd_plan.h"

#include <algorithm>

#include "bigbatch/common/error.h"

namespace bigbatch::ddp_detail {
namespace {

constexpr uint64_t kQSeed = 0x9e3779b97f4a7c15ull;

// The plan, how many it compresses, and the largest rank that would
// compress one.
std::vector<LowRankShape> planShapes(const PowerSgdOptions& options,
                                     const std::vector<torch::Tensor>& params, int64_t& compressed,
                                     int64_t& largestUseful) {
  std::vector<LowRankShape> plan(params.size());
  largestUseful = 0;
  compressed = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor& p = params[i];
    if (p.dim() < 2) continue;
    LowRankShape& m = plan[i];
    m.rows = p.size(0);
    m.cols = p.numel() / m.rows;
    const auto pays = [&](int64_t r) {
      return static_cast<double>((m.rows + m.cols) * r) * options.minCompressionRate <=
             static_cast<double>(m.rows * m.cols);
    };
    const int64_t r = std::min<int64_t>({options.rank, m.rows, m.cols});
    int64_t useful = std::min(m.rows, m.cols);
    while (useful > 0 && !pays(useful)) --useful;
    largestUseful = std::max(largestUseful, useful);
    if (!pays(r)) continue;
    m.rank = static_cast<int>(r);
    ++compressed;
  }
  return plan;
}

}  // namespace

bool compressesAny(const PowerSgdOptions& options, const std::vector<torch::Tensor>& params) {
  int64_t compressed = 0, largestUseful = 0;
  planShapes(options, params, compressed, largestUseful);
  return options.rank >= 1 && compressed > 0;
}

std::vector<LowRankShape> planLowRank(const PowerSgdOptions& options,
                                      const std::vector<torch::Tensor>& params) {
  BIGBATCH_REQUIRE(options.rank >= 1, InvalidArgument,
                   "ddp.powersgd_rank = {}: the factors need rank 1 or more", options.rank);
  int64_t compressed = 0, largestUseful = 0;
  std::vector<LowRankShape> out = planShapes(options, params, compressed, largestUseful);
  BIGBATCH_REQUIRE(compressed > 0, InvalidArgument,
                   "ddp.powersgd_rank = {} compresses none of the model's {} gradient tensors "
                   "(the factors would not be half the size of any matrix); the largest rank "
                   "that compresses one is {}",
                   options.rank, params.size(), largestUseful);
  return out;
}

torch::Tensor drawQ(size_t param, const LowRankShape& shape, int64_t step) {
  // splitmix64 of (parameter, step); libtorch's CPU generator keeps only
  // the low 32 bits of its seed.
  uint64_t z = kQSeed + param * 0xbf58476d1ce4e5b9ull +
               static_cast<uint64_t>(step) * 0x94d049bb133111ebull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  at::Generator generator = at::detail::createCPUGenerator(z & 0xffffffffull);
  return torch::randn({shape.cols, shape.rank}, generator, torch::kFloat);
}

int64_t lowRankWireBytes(const std::vector<LowRankShape>& plan, const Bucket& bucket,
                         DataType wireType) {
  int64_t elements = 0;
  for (const BucketEntry& e : bucket.entries) {
    const LowRankShape& m = plan[e.param];
    elements += m.rank == 0 ? e.numel : (m.rows + m.cols) * m.rank;
  }
  return elements * static_cast<int64_t>(elementSize(wireType));
}

std::string powerSgdQKey(const std::string& name) { return "powersgd/q/" + name; }
std::string powerSgdErrorKey(const std::string& name) { return "powersgd/error/" + name; }

PowerSgdSlot locatePowerSgdState(const std::string& key, const torch::Tensor& value,
                                 const std::vector<std::string>& names,
                                 const std::vector<LowRankShape>& plan) {
  const bool isQ = key.rfind("powersgd/q/", 0) == 0;
  const bool isError = key.rfind("powersgd/error/", 0) == 0;
  const std::string name = key.substr(isQ ? 11 : isError ? 15 : 0);
  const auto it = std::find(names.begin(), names.end(), name);
  BIGBATCH_REQUIRE((isQ || isError) && it != names.end(), InvalidArgument,
                   "the checkpoint's PowerSGD state '{}' names no compressed parameter of this "
                   "model",
                   key);
  const auto param = static_cast<size_t>(it - names.begin());
  const LowRankShape& m = plan[param];
  const std::vector<int64_t> want =
      isQ ? std::vector<int64_t>{m.cols, m.rank} : std::vector<int64_t>{m.rows, m.cols};
  BIGBATCH_REQUIRE(m.rank != 0 && value.sizes().vec() == want, InvalidArgument,
                   "the checkpoint's PowerSGD state '{}' has shape {}, this run's {} (was "
                   "ddp.powersgd_rank changed? resume with the checkpoint's rank)",
                   key, c10::str(value.sizes()), c10::str(c10::IntArrayRef(want)));
  return {param, isQ};
}

}  // namespace bigbatch::ddp_detail
