// The fused BatchNorm(+add)+ReLU of fused_batch_norm.h on cuDNN (the CUDA
// variant): the legacy cudnnBatchNormalization*Ex calls PyTorch's own
// cuDNN BatchNorm makes (aten/src/ATen/native/cudnn/BatchNorm.cpp), with
// the activation (and the add) cuDNN fuses into them — SPATIAL_PERSISTENT,
// NHWC, fp16 data with fp32 scale, bias and statistics; the handle is
// libtorch's for the current device and stream, workspaces and the reserve
// come from its caching allocator. Descriptors and workspace sizes are made
// once per shape; whether cuDNN fuses a shape is asked once, at that shape.
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn.h>
#include <torch/csrc/autograd/custom_function.h>

#include <c10/cuda/CUDAGraphsC10Utils.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>

#include "bigbatch/common/error.h"
#include "bigbatch/common/logging.h"
#include "bigbatch/models/fused_batch_norm.h"

namespace bigbatch {
namespace {

constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;

const char* statusName(cudnnStatus_t s) { return cudnnGetErrorString(s); }

void check(cudnnStatus_t s, const char* what) {
  BIGBATCH_REQUIRE(s == CUDNN_STATUS_SUCCESS, Error,
                   "fused BatchNorm+ReLU: {} failed: {}; set model.fused_bn = \"off\"", what,
                   statusName(s));
}

// One shape's descriptors: x (and y, z, their gradients) NHWC half, the
// derived per-channel descriptor of scale, bias and statistics, the ReLU —
// made once per shape (ShapePlans), not per call.
class Descriptors {
 public:
  explicit Descriptors(const torch::Tensor& x) {
    check(cudnnCreateTensorDescriptor(&x_), "cudnnCreateTensorDescriptor");
    check(cudnnCreateTensorDescriptor(&bn_), "cudnnCreateTensorDescriptor");
    check(cudnnCreateActivationDescriptor(&relu_), "cudnnCreateActivationDescriptor");
    check(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF,
                                     static_cast<int>(x.size(0)), static_cast<int>(x.size(1)),
                                     static_cast<int>(x.size(2)), static_cast<int>(x.size(3))),
          "cudnnSetTensor4dDescriptor");
    check(cudnnDeriveBNTensorDescriptor(bn_, x_, kMode), "cudnnDeriveBNTensorDescriptor");
    check(cudnnSetActivationDescriptor(relu_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0),
          "cudnnSetActivationDescriptor");
  }
  ~Descriptors() {
    cudnnDestroyActivationDescriptor(relu_);
    cudnnDestroyTensorDescriptor(bn_);
    cudnnDestroyTensorDescriptor(x_);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  cudnnTensorDescriptor_t x() const { return x_; }
  cudnnTensorDescriptor_t bn() const { return bn_; }
  cudnnActivationDescriptor_t relu() const { return relu_; }

 private:
  cudnnTensorDescriptor_t x_ = nullptr, bn_ = nullptr;
  cudnnActivationDescriptor_t relu_ = nullptr;
};

cudnnBatchNormOps_t opsFor(bool add) {
  return add ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION : CUDNN_BATCHNORM_OPS_BN_ACTIVATION;
}

struct Sizes {
  size_t forward = 0, backward = 0, reserve = 0;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;  // of the queries
};

Sizes querySizes(cudnnHandle_t h, const Descriptors& d, bool add) {
  Sizes s;
  const cudnnBatchNormOps_t ops = opsFor(add);
  cudnnTensorDescriptor_t z = add ? d.x() : nullptr;
  s.status = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      h, kMode, ops, d.x(), z, d.x(), d.bn(), d.relu(), &s.forward);
  if (s.status != CUDNN_STATUS_SUCCESS) return s;
  s.status = cudnnGetBatchNormalizationBackwardExWorkspaceSize(
      h, kMode, ops, d.x(), d.x(), d.x(), z, d.x(), d.bn(), d.relu(), &s.backward);
  if (s.status != CUDNN_STATUS_SUCCESS) return s;
  s.status = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, kMode, ops, d.relu(), d.x(),
                                                                  &s.reserve);
  return s;
}

// One shape on one device: its descriptors and the workspace sizes with and
// without the add; and, per (add, eps), whether cuDNN fuses it — asked by
// a forward and a backward call at this very shape and eps (probe()), as
// cuDNN refuses some shapes only at the call (CUDNN_STATUS_NOT_SUPPORTED),
// not at the workspace query, and a small stand-in shape proves nothing
// about the model's.
struct ShapePlan {
  explicit ShapePlan(const torch::Tensor& x) : d(x) {
    cudnnHandle_t h = at::native::getCudnnHandle();
    sizes[0] = querySizes(h, d, false);
    sizes[1] = querySizes(h, d, true);
  }
  const Sizes& sizesFor(bool add) const { return sizes[add ? 1 : 0]; }

  const Descriptors d;
  Sizes sizes[2];
  std::map<std::pair<bool, double>, cudnnStatus_t> probed;  // (add, eps) -> the probe's status
};

torch::Tensor bytes(size_t n, const torch::Tensor& like) {
  return torch::empty({static_cast<int64_t>(n)}, like.options().dtype(torch::kByte));
}

// The forward call; y, the saved statistics and the reserve are written.
cudnnStatus_t forwardTraining(const ShapePlan& p, const torch::Tensor& x, const torch::Tensor& z,
                              const torch::Tensor& weight, const torch::Tensor& bias,
                              const torch::Tensor& runningMean, const torch::Tensor& runningVar,
                              double factor, double eps, torch::Tensor& y,
                              torch::Tensor& saveMean, torch::Tensor& saveInvVar,
                              torch::Tensor& reserve) {
  const bool add = z.defined();
  const Sizes& s = p.sizesFor(add);
  if (s.status != CUDNN_STATUS_SUCCESS) return s.status;
  const Descriptors& d = p.d;
  y = torch::empty_like(x);
  saveMean = torch::empty_like(weight);
  saveInvVar = torch::empty_like(weight);
  reserve = bytes(s.reserve, x);
  const torch::Tensor workspace = bytes(s.forward, x);
  const float one = 1.f, zero = 0.f;
  return cudnnBatchNormalizationForwardTrainingEx(
      at::native::getCudnnHandle(), kMode, opsFor(add), &one, &zero, d.x(), x.data_ptr(),
      add ? d.x() : nullptr, add ? z.data_ptr() : nullptr, d.x(), y.data_ptr(), d.bn(),
      weight.data_ptr(), bias.data_ptr(), factor, runningMean.data_ptr(), runningVar.data_ptr(),
      eps, saveMean.data_ptr(), saveInvVar.data_ptr(), d.relu(), workspace.data_ptr(), s.forward,
      reserve.data_ptr(), static_cast<size_t>(reserve.numel()));
}

// The backward call; dx (and dz with the add), dWeight and dBias written.
cudnnStatus_t backwardTraining(const ShapePlan& p, bool add, const torch::Tensor& x,
                               const torch::Tensor& y, const torch::Tensor& dy,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               const torch::Tensor& saveMean, const torch::Tensor& saveInvVar,
                               const torch::Tensor& reserve, double eps, torch::Tensor& dx,
                               torch::Tensor& dz, torch::Tensor& dWeight, torch::Tensor& dBias) {
  const Sizes& s = p.sizesFor(add);
  if (s.status != CUDNN_STATUS_SUCCESS) return s.status;
  const Descriptors& d = p.d;
  dx = torch::empty_like(x);
  dz = add ? torch::empty_like(x) : torch::Tensor();
  dWeight = torch::empty_like(weight);
  dBias = torch::empty_like(bias);
  const torch::Tensor workspace = bytes(s.backward, x);
  const float one = 1.f, zero = 0.f;
  return cudnnBatchNormalizationBackwardEx(
      at::native::getCudnnHandle(), kMode, opsFor(add), &one, &zero, &one, &zero, d.x(),
      x.data_ptr(), d.x(), y.data_ptr(), d.x(), dy.data_ptr(), add ? d.x() : nullptr,
      add ? dz.data_ptr() : nullptr, d.x(), dx.data_ptr(), d.bn(), weight.data_ptr(),
      bias.data_ptr(), dWeight.data_ptr(), dBias.data_ptr(), eps, saveMean.data_ptr(),
      saveInvVar.data_ptr(), d.relu(), workspace.data_ptr(), s.backward, reserve.data_ptr(),
      static_cast<size_t>(reserve.numel()));
}

// The shapes met so far, each planned once; plans live as long as the
// process (a model has a few dozen shapes: ResNet-50 at one batch size 18).
// Threading: any thread; a plan, once made, is only read, but for its
// probe results, which the lock guards.
class ShapePlans {
 public:
  // The plan for x's shape on its device, made on first sight (fuses()
  // has made it before any fused call).
  ShapePlan& planFor(const torch::Tensor& x) {
    const auto key = keyOf(x);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(key);
    if (it == plans_.end()) it = plans_.emplace(key, std::make_unique<ShapePlan>(x)).first;
    return *it->second;
  }

  // Whether cuDNN fuses x's shape with (add, eps): a forward and a backward
  // at that shape, once (x read, every output scratch). Nothing of it —
  // the plan's descriptors, the probe — is made inside a CUDA graph
  // capture, which would record it into the graph: a case first met there
  // runs unfused (the warm-up before a capture meets every shape the
  // captured step has, so this is a defence, not a path). A shape whose
  // descriptors cuDNN refuses runs unfused too.
  bool fuses(const torch::Tensor& x, bool add, double eps, const torch::Tensor& weight) {
    std::lock_guard<std::mutex> lock(mu_);
    const Key shape = keyOf(x);
    if (unplannable_.count(shape)) return false;
    auto it = plans_.find(shape);
    const auto key = std::make_pair(add, eps);
    if (it != plans_.end()) {
      const auto& probed = it->second->probed;
      if (auto p = probed.find(key); p != probed.end()) return p->second == CUDNN_STATUS_SUCCESS;
    }
    if (c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) {
      log().warn("model.fused_bn: BatchNorm{}+ReLU at {} first met inside a CUDA graph capture; "
                 "it runs unfused there (a probe cannot be captured)",
                 add ? "+add" : "", shapeText(x));
      return false;
    }
    if (it == plans_.end()) {
      try {
        it = plans_.emplace(shape, std::make_unique<ShapePlan>(x)).first;
      } catch (const std::exception& e) {
        unplannable_.insert(shape);
        log().info("model.fused_bn: no cuDNN descriptors for {} ({}); those layers run unfused",
                   shapeText(x), e.what());
        return false;
      }
    }
    ShapePlan& p = *it->second;
    const cudnnStatus_t st = probe(p, x, add, eps, weight);
    p.probed.emplace(key, st);
    if (st != CUDNN_STATUS_SUCCESS) {
      log().info("model.fused_bn: cuDNN does not fuse BatchNorm{}+ReLU at {} (eps {}): {}; "
                 "those layers run unfused",
                 add ? "+add" : "", shapeText(x), eps, statusName(st));
    }
    if (st == CUDNN_STATUS_SUCCESS) ++fusedCases_;
    return st == CUDNN_STATUS_SUCCESS;
  }

  int64_t fusedCases() {
    std::lock_guard<std::mutex> lock(mu_);
    return fusedCases_;
  }

 private:
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t>;
  static Key keyOf(const torch::Tensor& x) {
    return {x.get_device(), x.size(0), x.size(1), x.size(2), x.size(3)};
  }
  static std::string shapeText(const torch::Tensor& x) {
    return fmt::format("[{}, {}, {}, {}]", x.size(0), x.size(1), x.size(2), x.size(3));
  }
  static cudnnStatus_t probe(const ShapePlan& p, const torch::Tensor& x, bool add, double eps,
                             const torch::Tensor& weight) {
    torch::NoGradGuard noGrad;
    const torch::Tensor one = torch::ones_like(weight), zero = torch::zeros_like(weight);
    torch::Tensor mean = torch::zeros_like(weight), var = torch::ones_like(weight);
    torch::Tensor y, saveMean, saveInvVar, reserve;
    cudnnStatus_t st = forwardTraining(p, x, add ? x : torch::Tensor(), one, zero, mean, var, 0.1,
                                       eps, y, saveMean, saveInvVar, reserve);
    if (st != CUDNN_STATUS_SUCCESS) return st;
    torch::Tensor dx, dz, dWeight, dBias;
    return backwardTraining(p, add, x, y, y, one, zero, saveMean, saveInvVar, reserve, eps, dx,
                            dz, dWeight, dBias);
  }

  std::mutex mu_;
  std::map<Key, std::unique_ptr<ShapePlan>> plans_;
  std::set<Key> unplannable_;  // shapes whose descriptors cuDNN refused
  int64_t fusedCases_ = 0;
};

ShapePlans& shapePlans() {
  static ShapePlans plans;
  return plans;
}

class BatchNormRelu : public torch::autograd::Function<BatchNormRelu> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& x, const torch::Tensor& z,
                                                const torch::Tensor& weight,
                                                const torch::Tensor& bias,
                                                const torch::Tensor& runningMean,
                                                const torch::Tensor& runningVar, double factor,
                                                double eps) {
    const c10::cuda::CUDAGuard onDevice(x.device());
    const ShapePlan& plan = shapePlans().planFor(x);
    torch::Tensor y, saveMean, saveInvVar, reserve;
    check(forwardTraining(plan, x, z, weight, bias, runningMean, runningVar, factor, eps, y,
                          saveMean, saveInvVar, reserve),
          "cudnnBatchNormalizationForwardTrainingEx");
    ctx->save_for_backward({x, y, weight, bias, saveMean, saveInvVar, reserve});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["add"] = z.defined();
    return {y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &y = saved[1], &weight = saved[2], &bias = saved[3];
    const torch::Tensor &saveMean = saved[4], &saveInvVar = saved[5], &reserve = saved[6];
    const double eps = ctx->saved_data["eps"].toDouble();
    const bool add = ctx->saved_data["add"].toBool();
    const c10::cuda::CUDAGuard onDevice(x.device());
    const torch::Tensor dy =
        grads[0].to(x.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
    torch::Tensor dx, dz, dWeight, dBias;
    check(backwardTraining(shapePlans().planFor(x), add, x, y, dy, weight, bias, saveMean,
                           saveInvVar, reserve, eps, dx, dz, dWeight, dBias),
          "cudnnBatchNormalizationBackwardEx");
    return {dx, dz, dWeight, dBias, torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

bool fusedBatchNormAvailable() { return true; }

int64_t fusedBatchNormCases() { return shapePlans().fusedCases(); }

torch::Tensor batchNormRelu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                            const torch::Tensor& z) {
  const auto& o = bn.options;
  // fp16 only: cuDNN's BN_ACTIVATION and BN_ADD_ACTIVATION ops take
  // CUDNN_DATA_HALF NHWC tensors (cudnnBatchNormalizationForwardTrainingEx's
  // documented requirements); bf16 is not asked.
  if (!bn.is_training() || !x.is_cuda() || x.dim() != 4 || x.scalar_type() != torch::kHalf ||
      x.size(1) % 4 != 0 ||
      !x.is_contiguous(at::MemoryFormat::ChannelsLast) || !o.affine() ||
      !o.track_running_stats() || !o.momentum().has_value() ||
      bn.weight.scalar_type() != torch::kFloat || bn.running_mean.scalar_type() != torch::kFloat) {
    return {};
  }
  if (z.defined() && (!z.sizes().equals(x.sizes()) || z.scalar_type() != x.scalar_type() ||
                      z.device() != x.device())) {
    return {};
  }
  const c10::cuda::CUDAGuard onDevice(x.device());
  if (!shapePlans().fuses(x, z.defined(), o.eps(), bn.weight)) return {};
  {
    // BatchNorm2d's own bookkeeping of a training forward.
    torch::NoGradGuard noGrad;
    if (bn.num_batches_tracked.defined()) bn.num_batches_tracked.add_(1);
  }
  const torch::Tensor zc = z.defined() ? z.contiguous(at::MemoryFormat::ChannelsLast) : z;
  return BatchNormRelu::apply(x, zc, bn.weight, bn.bias, bn.running_mean, bn.running_var,
                              *o.momentum(), o.eps())[0];
}

}  // namespace bigbatch
