#include "bigbatch/optim/kfac_preconditioner.h"

#include <cmath>

#include "bigbatch/common/error.h"
#include "bigbatch/optim/optimizer.h"

namespace bigbatch {
namespace {

const void* key(const torch::Tensor& t) { return t.unsafeGetTensorImpl(); }

bool finite(const torch::Tensor& t) { return t.isfinite().all().item<bool>(); }

// (F + damping·tr(F)/dim·I)⁻¹ of a symmetric positive semi-definite factor,
// in float64 (a Cholesky solve; the damping keeps it definite unless F = 0,
// where the identity's inverse is taken instead).
torch::Tensor dampedInverse(const torch::Tensor& f, double damping, const std::string& name,
                            const char* which) {
  const int64_t n = f.size(0);
  const double mean = f.trace().item<double>() / static_cast<double>(n);
  const double shift = mean > 0 ? damping * mean : 1.0;
  const torch::Tensor eye = torch::eye(n, f.options());
  const auto [l, info] = torch::linalg_cholesky_ex(f + shift * eye);
  // Only a damping too small for float rounding gets here.
  BIGBATCH_REQUIRE(info.item<int64_t>() == 0, InvalidArgument,
                   "K-FAC factor {} of '{}' ({}x{}) is not positive definite with damping {} of "
                   "its mean eigenvalue; raise optim.kfac_damping",
                   which, name, n, n, damping);
  // LAPACK hands back column-major storage; a row-major copy, as a resumed
  // run loads it, so both multiply the gradient with the same kernel and
  // round the same way.
  return torch::cholesky_inverse(l).to(torch::kFloat).contiguous();
}

}  // namespace

KfacPreconditioner::KfacPreconditioner(std::vector<NamedParameter> covered, KfacOptions options)
    : options_(options) {
  BIGBATCH_REQUIRE(options_.damping > 0, InvalidArgument,
                   "optim.kfac_damping = {} must be > 0 (it keeps the factors invertible)",
                   options_.damping);
  BIGBATCH_REQUIRE(options_.decay >= 0 && options_.decay < 1, InvalidArgument,
                   "optim.kfac_decay = {} must lie in [0, 1)", options_.decay);
  BIGBATCH_REQUIRE(options_.inverseInterval >= 1, InvalidArgument,
                   "optim.kfac_inverse_interval = {} must be >= 1", options_.inverseInterval);
  BIGBATCH_REQUIRE(options_.maxDim >= 1, InvalidArgument, "optim.kfac_max_dim = {} must be >= 1",
                   options_.maxDim);
  for (auto& p : covered) {
    const torch::Tensor& w = p.tensor;
    BIGBATCH_REQUIRE(w.dim() == 2 || w.dim() == 4, InvalidArgument,
                     "K-FAC covers linear ([out, in]) and convolution ([out, in, kh, kw]) "
                     "weights; '{}' has shape {}",
                     p.name, c10::str(w.sizes()));
    Layer l;
    l.name = p.name;
    l.weight = w;
    l.dimG = w.size(0);
    l.dimA = w.numel() / w.size(0);
    // The factors live where the weight does (run.device).
    const auto f64 = torch::TensorOptions().dtype(torch::kDouble).device(w.device());
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(w.device());
    l.sumA = torch::zeros({l.dimA, l.dimA}, f64);
    l.sumG = torch::zeros({l.dimG, l.dimG}, f64);
    l.a = torch::zeros({l.dimA, l.dimA}, f64);
    l.g = torch::zeros({l.dimG, l.dimG}, f64);
    l.aInverse = torch::zeros({l.dimA, l.dimA}, f32);
    l.gInverse = torch::zeros({l.dimG, l.dimG}, f32);
    index_[key(w)] = layers_.size();
    layers_.push_back(std::move(l));
  }
}

KfacPreconditioner::~KfacPreconditioner() = default;

int64_t KfacPreconditioner::statisticValues() const {
  int64_t n = 0;
  for (const Layer& l : layers_) n += 2 + l.dimA * l.dimA + l.dimG * l.dimG;
  return n;
}

bool KfacPreconditioner::covers(const torch::Tensor& weight) const {
  return index_.count(key(weight)) != 0;
}

KfacPreconditioner::Layer& KfacPreconditioner::layerOf(const torch::Tensor& weight) {
  auto it = index_.find(key(weight));
  BIGBATCH_CHECK(it != index_.end(), Error, "K-FAC statistics for a weight it does not cover");
  return layers_[it->second];
}

void KfacPreconditioner::addActivations(const torch::Tensor& weight, const torch::Tensor& rows) {
  Layer& l = layerOf(weight);
  addRows(l, "activations", rows, l.dimA, l.sumA, l.rowsA);
}

void KfacPreconditioner::addOutputGradients(const torch::Tensor& weight,
                                            const torch::Tensor& rows) {
  Layer& l = layerOf(weight);
  addRows(l, "output gradients", rows, l.dimG, l.sumG, l.rowsG);
}

void KfacPreconditioner::addRows(const Layer& l, const char* what, const torch::Tensor& rows,
                                 int64_t dim, torch::Tensor& sum, int64_t& count) {
  torch::NoGradGuard noGrad;
  BIGBATCH_CHECK(rows.dim() == 2 && rows.size(1) == dim, Error,
                 "K-FAC {} for '{}' have shape {}, expected [m, {}]", what, l.name,
                 c10::str(rows.sizes()), dim);
  // fp32 products (the rows are many), summed in fp64 across calls and ranks.
  const torch::Tensor r = rows.detach().to(torch::kFloat).contiguous();
  sum += r.t().mm(r).to(torch::kDouble);
  count += rows.size(0);
}

std::vector<double> KfacPreconditioner::takeStatistics() {
  size_t total = 0;
  for (const Layer& l : layers_) total += 2 + l.sumA.numel() + l.sumG.numel();
  std::vector<double> out;
  out.reserve(total);
  for (Layer& l : layers_) {
    out.push_back(static_cast<double>(l.rowsA));
    out.push_back(static_cast<double>(l.rowsG));
    for (const torch::Tensor* s : {&l.sumA, &l.sumG}) {
      const torch::Tensor host = s->to(torch::kCPU).contiguous();  // the ranks sum on the host
      const double* p = host.data_ptr<double>();
      out.insert(out.end(), p, p + host.numel());
    }
    l.sumA.zero_();
    l.sumG.zero_();
    l.rowsA = l.rowsG = 0;
  }
  return out;
}

void KfacPreconditioner::update(const std::vector<double>& summed, double gradUnscale) {
  torch::NoGradGuard noGrad;
  size_t at = 0;
  ++updates_;
  for (Layer& l : layers_) {
    BIGBATCH_CHECK(at + 2 + l.sumA.numel() + l.sumG.numel() <= summed.size(), Error,
                   "K-FAC statistics have {} values, fewer than the layout needs", summed.size());
    const double rowsA = summed[at], rowsG = summed[at + 1];
    at += 2;
    const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
    // from_blob does not own; copy so the factors outlive `summed`.
    torch::Tensor sumA = torch::from_blob(const_cast<double*>(&summed[at]), {l.dimA, l.dimA}, f64)
                             .to(l.a.device(), /*non_blocking=*/false, /*copy=*/true);
    at += l.sumA.numel();
    torch::Tensor sumG = torch::from_blob(const_cast<double*>(&summed[at]), {l.dimG, l.dimG}, f64)
                             .to(l.g.device(), /*non_blocking=*/false, /*copy=*/true);
    at += l.sumG.numel();
    if (rowsA <= 0 || rowsG <= 0 || !finite(sumA) || !finite(sumG)) continue;
    const torch::Tensor stepA = sumA / rowsA;
    const torch::Tensor stepG = sumG * (gradUnscale * gradUnscale / rowsG);
    if (l.updated == 0) {
      l.a.copy_(stepA);
      l.g.copy_(stepG);
    } else {
      l.a.mul_(options_.decay).add_(stepA, 1 - options_.decay);
      l.g.mul_(options_.decay).add_(stepG, 1 - options_.decay);
    }
    ++l.updated;
    if (l.updated == 1 || updates_ % options_.inverseInterval == 0) invert(l);
  }
}

void KfacPreconditioner::invert(Layer& l) const {
  l.aInverse = dampedInverse(l.a, options_.damping, l.name, "A");
  l.gInverse = dampedInverse(l.g, options_.damping, l.name, "G");
}

void KfacPreconditioner::precondition() {
  torch::NoGradGuard noGrad;
  for (Layer& l : layers_) {
    torch::Tensor grad = l.weight.grad();
    if (l.updated == 0 || !grad.defined()) continue;
    const torch::Tensor m = grad.reshape({l.dimG, l.dimA}).to(torch::kFloat);
    torch::Tensor p = l.gInverse.mm(m).mm(l.aInverse);
    // The relative damping leaves P's length arbitrary; give it the
    // gradient's, so K-FAC turns each layer's step and the optimizer sizes
    // it as it would the gradient. (A non-finite gradient stays non-finite.)
    const double gradNorm = m.norm().item<double>(), pNorm = p.norm().item<double>();
    if (pNorm > 0 && std::isfinite(pNorm)) p.mul_(gradNorm / pNorm);
    grad.copy_(p.view(grad.sizes()));
  }
}

std::vector<std::pair<std::string, torch::Tensor>> KfacPreconditioner::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const Layer& l : layers_) {
    const std::string k = "kfac." + l.name + ".";
    out.emplace_back(k + "A", l.a);
    out.emplace_back(k + "G", l.g);
    out.emplace_back(k + "A_inverse", l.aInverse);
    out.emplace_back(k + "G_inverse", l.gInverse);
    out.emplace_back(k + "updates", torch::tensor(l.updated, torch::kInt64));
  }
  out.emplace_back("kfac.updates", torch::tensor(updates_, torch::kInt64));
  return out;
}

void KfacPreconditioner::loadState(const std::unordered_map<std::string, torch::Tensor>& byName) {
  torch::NoGradGuard noGrad;
  for (Layer& l : layers_) {
    const std::string k = "kfac." + l.name + ".";
    l.a.copy_(byName.at(k + "A"));
    l.g.copy_(byName.at(k + "G"));
    l.aInverse.copy_(byName.at(k + "A_inverse"));
    l.gInverse.copy_(byName.at(k + "G_inverse"));
    l.updated = byName.at(k + "updates").item<int64_t>();
  }
  updates_ = byName.at("kfac.updates").item<int64_t>();
}

}  // namespace bigbatch
