// K-FAC preconditioning (Martens & Grosse 2015; convolutions as in KFC,
// Grosse & Martens 2016; large-batch use as in Osawa et al. 2019): each
// covered layer's gradient ∇ (a [out, in·kh·kw] matrix) is replaced by
//
//     P = (G + γ_G·I)⁻¹ · ∇ · (A + γ_A·I)⁻¹ · |∇| / |(G + γ_G·I)⁻¹ · ∇ · (A + γ_A·I)⁻¹|
//
// (the direction of the K-FAC step at the length of the layer's gradient)
// where A is the running average of the layer's input covariance (for a
// convolution, of its im2col patches: one row per sample and output
// position) and G that of the gradient of the loss with respect to the
// layer's output (one row per sample and position, unscaled to a single
// sample's loss). The damping of each factor is relative to its mean
// eigenvalue, γ_A = damping·tr(A)/dim A, so it does not depend on the scale
// of activations or loss — which also leaves the preconditioned vector's
// length arbitrary, so P keeps the gradient's norm: K-FAC turns each layer's
// step, and the optimizer (SGD, LARS's trust ratio with its weight decay
// term, LAMB) sizes it as it would the plain gradient. This is the
// "empirical Fisher" flavour: G comes from the gradients
// of the training loss itself.
//
// Covered layers: the optimizer's regular (not excluded) parameters of rank 2
// ([out, in], linear) or 4 ([out, in, kh, kw], convolution, groups = 1)
// whose factors are at most KfacOptions::maxDim on a side; their biases and
// BatchNorm parameters, and larger layers, keep their plain gradient.
//
// One step: the caller records rows of some samples' activations and output
// gradients (train/kfac_tap.h does it during the forward and backward
// passes), takes the step's statistics as sums, adds them up over the ranks,
// and hands them to update(); precondition() then rewrites the gradients. The
// factors are identical on every rank (the same sums, the same arithmetic),
// and they are part of the optimizer's state, so a resumed run continues
// bit for bit.
//
// Threading: one thread (the training thread) uses an instance.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bigbatch {

struct NamedParameter;

struct KfacOptions {
  double damping = 0.03;        // each factor's Tikhonov damping, relative to trace / dim
  double decay = 0.95;          // running factors: F <- decay·F + (1 - decay)·F_step
  int64_t inverseInterval = 1;  // steps between re-inversions of the damped factors
  // A layer is covered only when both factors are at most maxDim × maxDim:
  // a layer costs dim A² + dim G² values of statistics summed over the ranks
  // every step and as many of running factors and inverses (a 3×3 conv of
  // 512 channels, dim A = 4608: 21 M values, 170 MB in float64). Larger
  // layers keep their plain gradient (Optimizer::enableKfac).
  int64_t maxDim = 1024;
};

// What enableKfac covered, and what that costs.
struct KfacCoverage {
  int64_t layers = 0;            // covered conv and linear weights
  int64_t tooLarge = 0;          // candidates left to their plain gradient (a factor > maxDim)
  std::string largestSkipped;    // the name of the largest of those ("" if none)
  int64_t statisticValues = 0;   // per step, summed over the ranks: Σ 2 + dim A² + dim G²
};

class KfacPreconditioner {
 public:
  // `covered`: the parameters to precondition (rank 2 or 4 each).
  KfacPreconditioner(std::vector<NamedParameter> covered, KfacOptions options);
  ~KfacPreconditioner();

  // Whether `weight` (the very tensor, not a copy) is a covered layer.
  bool covers(const torch::Tensor& weight) const;
  // This step's rows for a covered layer: activations [m, dim A] and output
  // gradients [m, dim G] (m rows each, any float dtype). Summed, not stored.
  void addActivations(const torch::Tensor& weight, const torch::Tensor& rows);
  void addOutputGradients(const torch::Tensor& weight, const torch::Tensor& rows);

  // This step's statistics since the last call, flat: per covered layer
  // [rows of A, rows of G, Σ aaᵀ (dim A²), Σ ggᵀ (dim G²)] — zeros for a layer
  // not seen — in a layout every rank shares. Clears the sums.
  std::vector<double> takeStatistics();
  // Folds statistics (summed over ranks) into the running factors.
  // `gradUnscale` multiplies the recorded output gradients back to one
  // sample's loss (the global batch's size over the loss scale). A layer
  // with no rows, or with a non-finite sum, keeps its factors this step.
  void update(const std::vector<double>& summed, double gradUnscale);
  // P in place of each covered gradient (layers without factors yet, or
  // without a gradient, are left alone; a non-finite gradient stays so).
  void precondition();

  // "kfac.<param>.{A,G,A_inverse,G_inverse,updates}" and "kfac.updates".
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  // Entries named as state() gives them; shapes already checked by the caller.
  void loadState(const std::unordered_map<std::string, torch::Tensor>& byName);

  const KfacOptions& options() const { return options_; }
  size_t layers() const { return layers_.size(); }
  // The values takeStatistics() hands over each step: Σ 2 + dim A² + dim G².
  int64_t statisticValues() const;

 private:
  struct Layer {
    std::string name;
    torch::Tensor weight;
    int64_t dimA = 0, dimG = 0;
    torch::Tensor sumA, sumG;  // this step's Σ aaᵀ, Σ ggᵀ (float64)
    int64_t rowsA = 0, rowsG = 0;
    torch::Tensor a, g;                // running factors (float64)
    torch::Tensor aInverse, gInverse;  // damped inverses (float32)
    int64_t updated = 0;               // updates that reached this layer (0: no factors yet)
  };
  Layer& layerOf(const torch::Tensor& weight);
  // sum += rowsᵀ·rows, count += rows (rows: [m, dim]).
  static void addRows(const Layer& l, const char* what, const torch::Tensor& rows, int64_t dim,
                      torch::Tensor& sum, int64_t& count);
  void invert(Layer& layer) const;

  KfacOptions options_;
  std::vector<Layer> layers_;
  std::unordered_map<const void*, size_t> index_;  // weight's TensorImpl -> layer
  int64_t updates_ = 0;
};

}  // namespace bigbatch
