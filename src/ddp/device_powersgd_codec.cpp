#include "device_powersgd_codec.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include <limits>

#include "bigbatch/common/error.h"

#ifdef BIGBATCH_WITH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "cuda/orthogonalise_cuda.h"
#endif

namespace bigbatch::ddp_detail {
namespace {

// Orthonormalises the columns of the rows x rank matrix `p` in place:
// modified Gram-Schmidt in double, on the rank x rows transpose so each
// column is contiguous; column c normalised, then projected out of every
// later column at once (one rank-1 update). A column with nothing left
// once the earlier ones are out (under 1e-9 of its own norm: a zero
// gradient, or a matrix of lower rank than the factors) becomes zero, not
// amplified rounding noise — the host codec's rule, chosen by a mask.
void orthogonalise(const torch::Tensor& p) {
  const int64_t rank = p.size(1);
  torch::Tensor t = p.t().to(torch::kDouble).contiguous();  // rank x rows
  const torch::Tensor original = t.pow(2).sum(1);           // each column's squared norm
  for (int64_t c = 0; c < rank; ++c) {
    torch::Tensor column = t[c];
    const torch::Tensor norm2 = column.dot(column);
    const torch::Tensor keep = norm2.gt(original[c] * 1e-18).logical_and(norm2.gt(0));
    column.mul_(torch::where(keep, norm2.rsqrt(), torch::zeros_like(norm2)));
    if (c + 1 == rank) break;
    torch::Tensor later = t.narrow(0, c + 1, rank - c - 1);
    later.addr_(later.mv(column), column, /*beta=*/1, /*alpha=*/-1);
  }
  p.copy_(t.t());
}

// Every factor in `ps` (rows x rank views of `packed`) orthogonalised: on
// a CUDA device in one launch (cuda/orthogonalise_cuda.h), elsewhere — and
// above the kernel's largest rank — with the ATen ops above, one at a time.
void orthogonaliseAll(const std::vector<torch::Tensor>& ps, const torch::Tensor& packed) {
#ifdef BIGBATCH_WITH_CUDA
  if (packed.is_cuda()) {
    std::vector<PackedFactor> factors;
    bool fits = true;
    for (const torch::Tensor& p : ps) {
      fits = fits && p.size(1) <= kMaxCudaOrthogonaliseRank;
      factors.push_back({p.data_ptr<float>() - packed.data_ptr<float>(), p.size(0),
                         static_cast<int>(p.size(1))});
    }
    if (fits) {
      const torch::Tensor scratch =
          torch::empty({packed.numel()}, packed.options().dtype(torch::kDouble));
      try {
        orthogonaliseFactorsCuda(packed.data_ptr<float>(), scratch.data_ptr<double>(), factors,
                                 c10::cuda::getCurrentCUDAStream(packed.device().index()).stream());
      } catch (const std::runtime_error& e) {
        BIGBATCH_THROW(Error, "{} on {}", e.what(), packed.device().str());
      }
      return;
    }
  }
#endif
  for (const torch::Tensor& p : ps) orthogonalise(p);
}

}  // namespace

DevicePowerSgdCodec::DevicePowerSgdCodec(const PowerSgdOptions& options, DataType wireType,
                                         const std::vector<torch::Tensor>& params,
                                         const std::vector<std::string>& names, int worldSize,
                                         torch::Device device)
    : options_(options),
      wireType_(wireType),
      worldSize_(worldSize),
      device_(device),
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
    if (plan_[i].rank == 0) continue;
    matrices_[i].first = drawQ(i, plan_[i], 0).to(device_);
    matrices_[i].q = matrices_[i].first.clone();
  }
}

void DevicePowerSgdCodec::unitColumns(size_t param) {
  Matrix& m = matrices_[param];
  torch::Tensor norms = m.q.norm(2, {0}, /*keepdim=*/true);
  const torch::Tensor usable = norms.isfinite().logical_and(norms.gt(0)).all();
  m.q = torch::where(usable, m.q, m.first);
  m.q.div_(m.q.norm(2, {0}, /*keepdim=*/true));
}

void DevicePowerSgdCodec::adoptStateOnCurrentStream() {
  adopted_ = true;
  if (!device_.is_cuda()) return;
  const c10::impl::VirtualGuardImpl impl(device_.type());
  const c10::Stream current = impl.getStream(device_);
  for (Matrix& m : matrices_) {
    for (torch::Tensor* t : {&m.q, &m.first, &m.error}) {
      if (t->defined()) t->record_stream(current);
    }
  }
}

void DevicePowerSgdCodec::sumUncompressed(const Bucket& bucket, const torch::Tensor& values,
                                          DeviceWireSum& wire) {
  std::vector<torch::Tensor> parts;
  for (const BucketEntry& e : bucket.entries) {
    if (plan_[e.param].rank == 0) parts.push_back(values.narrow(0, e.offset, e.numel));
  }
  if (parts.empty()) return;
  if (parts.size() == 1) {
    sumAsWireType(parts[0], wireType_, worldSize_, scratch_, wire);  // in place
    return;
  }
  torch::Tensor message = torch::cat(parts);
  sumAsWireType(message, wireType_, worldSize_, scratch_, wire);
  int64_t at = 0;
  for (torch::Tensor& part : parts) {
    part.copy_(message.narrow(0, at, part.numel()));
    at += part.numel();
  }
}

void DevicePowerSgdCodec::exchange(size_t index, const Bucket& bucket,
                                   const torch::Tensor& values, DeviceWireSum& wire) {
  torch::NoGradGuard noGrad;
  if (!adopted_) adoptStateOnCurrentStream();
  if (index == 0) ++steps_;  // buckets go in order: bucket 0 opens a step
  if (steps_ <= options_.startStep) {
    sumAsWireType(values, wireType_, worldSize_, scratch_, wire);
    return;
  }
  sumUncompressed(bucket, values, wire);
  int64_t pElements = 0, qElements = 0;
  for (const BucketEntry& e : bucket.entries) {
    const LowRankShape& s = plan_[e.param];
    pElements += s.rows * s.rank;
    qElements += s.cols * s.rank;
  }
  if (pElements == 0) return;
  if (!p_.defined() || p_.numel() < pElements) p_ = torch::empty({pElements}, values.options());
  if (!qSum_.defined() || qSum_.numel() < qElements)
    qSum_ = torch::empty({qElements}, values.options());

  // Each compressed gradient G (a view of the bucket), X its input — E +=
  // G, in E's memory, with error feedback; G itself without — and each
  // matrix's factors in the packed buffers.
  struct Work {
    size_t param;
    torch::Tensor g, x, p, q;
  };
  std::vector<Work> work;
  int64_t pAt = 0, qAt = 0;
  for (const BucketEntry& e : bucket.entries) {
    const LowRankShape& s = plan_[e.param];
    if (s.rank == 0) continue;
    Matrix& m = matrices_[e.param];
    Work w{e.param, values.narrow(0, e.offset, e.numel).view({s.rows, s.cols}), {},
           p_.narrow(0, pAt, s.rows * s.rank).view({s.rows, s.rank}),
           qSum_.narrow(0, qAt, s.cols * s.rank).view({s.cols, s.rank})};
    if (options_.errorFeedback) {
      if (m.error.defined()) {
        m.error.add_(w.g);
      } else {
        m.error = w.g.clone();
      }
      w.x = m.error;
    } else {
      w.x = w.g;
    }
    work.push_back(std::move(w));
    pAt += s.rows * s.rank;
    qAt += s.cols * s.rank;
  }
  const torch::Tensor pAll = p_.narrow(0, 0, pElements), qAll = qSum_.narrow(0, 0, qElements);

  // P = X Q, summed.
  for (Work& w : work) {
    Matrix& m = matrices_[w.param];
    if (!options_.warmStart) m.q = drawQ(w.param, plan_[w.param], steps_).to(device_);
    unitColumns(w.param);
    at::mm_out(w.p, w.x, m.q);
  }
  sumAsWireType(pAll, wireType_, worldSize_, scratch_, wire);
  torch::Tensor finite = pAll.isfinite().all();

  // Q = X^T P with P orthonormal, summed.
  std::vector<torch::Tensor> ps;
  for (const Work& w : work) ps.push_back(w.p);
  orthogonaliseAll(ps, pAll);
  for (Work& w : work) at::mm_out(w.q, w.x.t(), w.p);
  sumAsWireType(qAll, wireType_, worldSize_, scratch_, wire);
  finite = finite.logical_and(qAll.isfinite().all());
  const torch::Tensor notFinite = finite.logical_not();

  // M ~ P Q^T into the bucket; this rank's share of what it left out kept,
  // E = X - P Q^T / N; Q kept for the next step's warm start. A non-finite
  // step: NaN out, the error memory reset, the last finite Q kept.
  const double share = 1.0 / static_cast<double>(worldSize_);
  for (Work& w : work) {
    Matrix& m = matrices_[w.param];
    at::mm_out(w.g, w.p, w.q.t());
    w.g.masked_fill_(notFinite, std::numeric_limits<float>::quiet_NaN());
    if (options_.errorFeedback) {
      m.error.add_(w.g, -share);
      m.error.masked_fill_(notFinite, 0.0);
    }
    if (options_.warmStart) m.q = torch::where(finite, w.q, m.q);
  }
}

int64_t DevicePowerSgdCodec::wireBytes(const Bucket& bucket) const {
  return lowRankWireBytes(plan_, bucket, wireType_);
}

BucketCodec::NamedState DevicePowerSgdCodec::state() const {
  NamedState out;
  out.emplace_back(kPowerSgdStepsKey, torch::tensor({steps_}, torch::kLong));
  for (size_t i = 0; i < matrices_.size(); ++i) {
    if (plan_[i].rank == 0) continue;
    const Matrix& m = matrices_[i];
    out.emplace_back(powerSgdQKey(names_[i]), m.q.cpu().clone());
    if (m.error.defined()) out.emplace_back(powerSgdErrorKey(names_[i]), m.error.cpu().clone());
  }
  return out;
}

void DevicePowerSgdCodec::loadState(const NamedState& state) {
  for (const auto& [key, value] : state) {
    if (key == kPowerSgdStepsKey) {
      steps_ = value.item<int64_t>();
      continue;
    }
    const PowerSgdSlot slot = locatePowerSgdState(key, value, names_, plan_);
    Matrix& m = matrices_[slot.param];
    (slot.isQ ? m.q : m.error) = value.to(device_, torch::kFloat).contiguous().clone();
  }
  adopted_ = false;  // new tensors, on the caller's stream
}

void DevicePowerSgdCodec::rescale(double factor) {
  torch::NoGradGuard noGrad;
  for (Matrix& m : matrices_) {
    if (m.error.defined()) m.error.mul_(factor);
  }
}

}  // namespace bigbatch::ddp_detail
