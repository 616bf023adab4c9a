#include "powersgd_codec.h"

#include <cstring>
#include <limits>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"
#include "low_rank_kernels.h"

namespace bigbatch::ddp_detail {
namespace {

torch::Tensor matrixAt(float* data, int64_t offset, int64_t rows, int64_t cols) {
  return torch::from_blob(data + offset, {rows, cols}, torch::kFloat);
}

}  // namespace

PowerSgdCodec::PowerSgdCodec(const PowerSgdOptions& options, DataType wireType,
                             const std::vector<torch::Tensor>& params,
                             const std::vector<std::string>& names, int worldSize,
                             BucketResult result)
    : options_(options),
      wireType_(wireType),
      worldSize_(worldSize),
      result_(result),
      names_(names),
      plan_(planLowRank(options, params)),
      matrices_(params.size()) {
  BIGBATCH_REQUIRE(wireType == DataType::kFloat32 || wireType == DataType::kFloat16 ||
                       wireType == DataType::kBFloat16,
                   InvalidArgument,
                   "ddp.compression = powersgd sends fp32, fp16 or bf16 (ddp.exchange_dtype), "
                   "not {}",
                   dataTypeName(wireType));
  for (size_t i = 0; i < params.size(); ++i) {
    if (plan_[i].rank != 0) matrices_[i].q = freshQ(i);
  }
}

torch::Tensor PowerSgdCodec::freshQ(size_t param) const {
  return drawQ(param, plan_[param], options_.warmStart ? 0 : steps_);
}

void PowerSgdCodec::unitColumns(size_t param) {
  Matrix& m = matrices_[param];
  torch::Tensor norms = m.q.norm(2, {0}, /*keepdim=*/true);
  const bool usable = norms.isfinite().logical_and(norms.gt(0)).all().item<bool>();
  if (!usable) {
    m.q = freshQ(param);
    norms = m.q.norm(2, {0}, /*keepdim=*/true);
  }
  m.q.div_(norms);
}

void PowerSgdCodec::sumSegments(WireSum& wire, BucketResult result) {
  size_t count = 0;
  for (const auto& [at, n] : segments_) count += n;
  if (count == 0) return;
  const bool fp32 = wireType_ == DataType::kFloat32;
  const bool divide = fp32 && result == BucketResult::kMean;  // 16 bits: the pre-divided sum
  if (fp32 && segments_.size() == 1) {
    wire.sum(segments_[0].first, count, DataType::kFloat32);  // in place, no copy
    if (divide) divideBy(segments_[0].first, count, worldSize_);
    return;
  }
  // fp32 as it is; 16 bits pre-divided by the world size (the sum's range),
  // multiplied back unless the mean is wanted.
  const float down = fp32 ? 1.0f : 1.0f / static_cast<float>(worldSize_);
  const float up = fp32 || result == BucketResult::kMean ? 1.0f : static_cast<float>(worldSize_);
  const size_t width = elementSize(wireType_);
  wire_.resize(count * width);
  size_t offset = 0;
  for (const auto& [at, n] : segments_) {
    packFloats(wireType_, wire_.data() + offset * width, at, n, down);
    offset += n;
  }
  wire.sum(wire_.data(), count, wireType_);
  offset = 0;
  for (const auto& [at, n] : segments_) {
    unpackFloats(wireType_, at, wire_.data() + offset * width, n, up);
    if (divide) divideBy(at, n, worldSize_);
    offset += n;
  }
}

void PowerSgdCodec::sumUncompressed(const Bucket& bucket, float* data, WireSum& wire) {
  segments_.clear();
  for (const BucketEntry& e : bucket.entries) {
    if (plan_[e.param].rank == 0)
      segments_.emplace_back(data + e.offset, static_cast<size_t>(e.numel));
  }
  sumSegments(wire, result_);
}

void PowerSgdCodec::passNonFinite(const Bucket& bucket, float* data) {
  for (const BucketEntry& e : bucket.entries) {
    Matrix& m = matrices_[e.param];
    const LowRankShape& s = plan_[e.param];
    if (s.rank == 0) continue;
    matrixAt(data, e.offset, s.rows, s.cols).fill_(std::numeric_limits<float>::quiet_NaN());
    if (m.error.defined()) m.error.zero_();
  }
  // Once a run: under dynamic loss scaling the first steps overflow by design.
  if (nonFiniteSteps_++ == 0)
    log().warn(
        "PowerSGD: step {}'s gradient factors are not finite (an overflow); the step's "
        "compressed gradients are NaN for the loss scaler to skip and the error memory "
        "is reset (said once; later such steps are not logged)",
        steps_);
}

void PowerSgdCodec::exchange(size_t index, const Bucket& bucket, float* data, WireSum& wire) {
  if (index == 0) ++steps_;  // buckets go in order: bucket 0 opens a step
  if (steps_ <= options_.startStep) {
    segments_.assign(1, {data, static_cast<size_t>(bucket.numel)});
    sumSegments(wire, result_);
    return;
  }
  sumUncompressed(bucket, data, wire);
  int64_t pElements = 0, qElements = 0;
  for (const BucketEntry& e : bucket.entries) {
    const LowRankShape& s = plan_[e.param];
    pElements += s.rows * s.rank;
    qElements += s.cols * s.rank;
  }
  if (pElements == 0) return;
  torch::NoGradGuard noGrad;
  if (p_.numel() < pElements) p_ = torch::empty({pElements}, torch::kFloat);
  if (qSum_.numel() < qElements) qSum_ = torch::empty({qElements}, torch::kFloat);
  // X: the gradient with the error added, in the error's memory (or the
  // gradient itself without error feedback).
  const auto inputOf = [&](const BucketEntry& e) {
    Matrix& m = matrices_[e.param];
    return options_.errorFeedback ? m.error.data_ptr<float>() : data + e.offset;
  };
  float* pData = p_.data_ptr<float>();
  float* qData = qSum_.data_ptr<float>();

  // X = M + E and P = X Q in one pass for every compressed matrix; the Ps
  // summed.
  int64_t pAt = 0;
  for (const BucketEntry& e : bucket.entries) {
    Matrix& m = matrices_[e.param];
    const LowRankShape& s = plan_[e.param];
    if (s.rank == 0) continue;
    const float* folded = nullptr;  // what is added to X: the gradient, into E
    if (options_.errorFeedback) {
      if (m.error.defined()) {
        folded = data + e.offset;
      } else {
        m.error = matrixAt(data, e.offset, s.rows, s.cols).clone();
      }
    }
    if (!options_.warmStart) m.q = freshQ(e.param);
    unitColumns(e.param);
    qt_.resize(static_cast<size_t>(s.cols * s.rank));
    low_rank::transpose(m.q.data_ptr<float>(), s.cols, s.rank, qt_.data());
    low_rank::foldAndProject(inputOf(e), folded, s.rows, s.cols, qt_.data(), s.rank,
                             pData + pAt);
    pAt += s.rows * s.rank;
  }
  segments_.assign(1, {pData, static_cast<size_t>(pElements)});
  sumSegments(wire, BucketResult::kSum);
  if (!low_rank::allFinite(pData, pElements)) return passNonFinite(bucket, data);

  // Q = X^T P with P orthonormal, summed.
  pAt = 0;
  int64_t qAt = 0;
  for (const BucketEntry& e : bucket.entries) {
    const LowRankShape& s = plan_[e.param];
    if (s.rank == 0) continue;
    low_rank::orthogonalise(pData + pAt, s.rows, s.rank, work_);
    low_rank::projectBack(inputOf(e), s.rows, s.cols, pData + pAt, s.rank, qData + qAt, work_);
    pAt += s.rows * s.rank;
    qAt += s.cols * s.rank;
  }
  segments_.assign(1, {qData, static_cast<size_t>(qElements)});
  sumSegments(wire, BucketResult::kSum);
  if (!low_rank::allFinite(qData, qElements)) return passNonFinite(bucket, data);

  // M ~ P Q^T (or its mean, M / N) into the bucket and, in the same pass,
  // this rank's share of what it left out kept: E = X - P Q^T / N.
  pAt = 0;
  qAt = 0;
  const float share = 1.0f / static_cast<float>(worldSize_);
  for (const BucketEntry& e : bucket.entries) {
    Matrix& m = matrices_[e.param];
    const LowRankShape& s = plan_[e.param];
    if (s.rank == 0) continue;
    qt_.resize(static_cast<size_t>(s.cols * s.rank));
    low_rank::transpose(qData + qAt, s.cols, s.rank, qt_.data());
    low_rank::reconstruct(data + e.offset,
                          options_.errorFeedback ? m.error.data_ptr<float>() : nullptr, s.rows,
                          s.cols, pData + pAt, qt_.data(), s.rank, share,
                          result_ == BucketResult::kMean ? static_cast<float>(worldSize_) : 1.0f);
    if (options_.warmStart)
      m.q.copy_(qSum_.narrow(0, qAt, s.cols * s.rank).view({s.cols, s.rank}));
    pAt += s.rows * s.rank;
    qAt += s.cols * s.rank;
  }
}

int64_t PowerSgdCodec::wireBytes(const Bucket& bucket) const {
  return lowRankWireBytes(plan_, bucket, wireType_);
}

GradientCodec::NamedState PowerSgdCodec::state() const {
  NamedState out;
  out.emplace_back(kPowerSgdStepsKey, torch::tensor({steps_}, torch::kLong));
  for (size_t i = 0; i < matrices_.size(); ++i) {
    const Matrix& m = matrices_[i];
    if (plan_[i].rank == 0) continue;
    out.emplace_back(powerSgdQKey(names_[i]), m.q.clone());
    if (m.error.defined()) out.emplace_back(powerSgdErrorKey(names_[i]), m.error.clone());
  }
  return out;
}

void PowerSgdCodec::loadState(const NamedState& state) {
  for (const auto& [key, value] : state) {
    if (key == kPowerSgdStepsKey) {
      steps_ = value.item<int64_t>();
      continue;
    }
    const PowerSgdSlot slot = locatePowerSgdState(key, value, names_, plan_);
    Matrix& m = matrices_[slot.param];
    (slot.isQ ? m.q : m.error) = value.to(torch::kFloat).contiguous().clone();
  }
}

void PowerSgdCodec::rescale(double factor) {
  for (Matrix& m : matrices_) {
    if (m.error.defined()) m.error.mul_(factor);
  }
}

}  // namespace bigbatch::ddp_detail
