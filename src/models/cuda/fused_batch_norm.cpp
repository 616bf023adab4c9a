// The fused BatchNorm(+add)+ReLU of fused_batch_norm.h on cuDNN (the CUDA
// variant): the legacy cudnnBatchNormalization*Ex calls PyTorch's own
// cuDNN BatchNorm makes (aten/src/ATen/native/cudnn/BatchNorm.cpp), with
// the activation (and the add) cuDNN fuses into them — SPATIAL_PERSISTENT,
// NHWC, 16-bit data with fp32 scale, bias and statistics; the handle is
// libtorch's for the current device and stream, workspaces and the reserve
// come from its caching allocator.
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDAGuard.h>
#include <cudnn.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>
#include <set>
#include <tuple>

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

cudnnDataType_t dataTypeOf(torch::ScalarType t) {
  return t == torch::kBFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

// One call's descriptors: x (and y, z, their gradients) NHWC, the derived
// per-channel descriptor of scale, bias and statistics, and the ReLU.
class Descriptors {
 public:
  explicit Descriptors(const torch::Tensor& x) {
    check(cudnnCreateTensorDescriptor(&x_), "cudnnCreateTensorDescriptor");
    check(cudnnCreateTensorDescriptor(&bn_), "cudnnCreateTensorDescriptor");
    check(cudnnCreateActivationDescriptor(&relu_), "cudnnCreateActivationDescriptor");
    check(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NHWC, dataTypeOf(x.scalar_type()),
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
};

cudnnStatus_t querySizes(cudnnHandle_t h, const Descriptors& d, bool add, Sizes& s) {
  const cudnnBatchNormOps_t ops = opsFor(add);
  cudnnTensorDescriptor_t z = add ? d.x() : nullptr;
  cudnnStatus_t st = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      h, kMode, ops, d.x(), z, d.x(), d.bn(), d.relu(), &s.forward);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  st = cudnnGetBatchNormalizationBackwardExWorkspaceSize(h, kMode, ops, d.x(), d.x(), d.x(), z,
                                                         d.x(), d.bn(), d.relu(), &s.backward);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  return cudnnGetBatchNormalizationTrainingExReserveSpaceSize(h, kMode, ops, d.relu(), d.x(),
                                                              &s.reserve);
}

torch::Tensor bytes(size_t n, const torch::Tensor& like) {
  return torch::empty({static_cast<int64_t>(n)}, like.options().dtype(torch::kByte));
}

// The forward call; y, the saved statistics and the reserve are written.
cudnnStatus_t forwardTraining(const torch::Tensor& x, const torch::Tensor& z,
                              const torch::Tensor& weight, const torch::Tensor& bias,
                              const torch::Tensor& runningMean, const torch::Tensor& runningVar,
                              double factor, double eps, torch::Tensor& y,
                              torch::Tensor& saveMean, torch::Tensor& saveInvVar,
                              torch::Tensor& reserve) {
  cudnnHandle_t h = at::native::getCudnnHandle();  // on the current stream
  const bool add = z.defined();
  const Descriptors d(x);
  Sizes s;
  if (const cudnnStatus_t st = querySizes(h, d, add, s); st != CUDNN_STATUS_SUCCESS) return st;
  y = torch::empty_like(x);
  saveMean = torch::empty_like(weight);
  saveInvVar = torch::empty_like(weight);
  reserve = bytes(s.reserve, x);
  const torch::Tensor workspace = bytes(s.forward, x);
  const float one = 1.f, zero = 0.f;
  return cudnnBatchNormalizationForwardTrainingEx(
      h, kMode, opsFor(add), &one, &zero, d.x(), x.data_ptr(), add ? d.x() : nullptr,
      add ? z.data_ptr() : nullptr, d.x(), y.data_ptr(), d.bn(), weight.data_ptr(),
      bias.data_ptr(), factor, runningMean.data_ptr(), runningVar.data_ptr(), eps,
      saveMean.data_ptr(), saveInvVar.data_ptr(), d.relu(), workspace.data_ptr(), s.forward,
      reserve.data_ptr(), static_cast<size_t>(reserve.numel()));
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
    torch::Tensor y, saveMean, saveInvVar, reserve;
    check(forwardTraining(x, z, weight, bias, runningMean, runningVar, factor, eps, y, saveMean,
                          saveInvVar, reserve),
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
    cudnnHandle_t h = at::native::getCudnnHandle();
    const Descriptors d(x);
    Sizes s;
    check(querySizes(h, d, add, s), "the workspace sizes");
    torch::Tensor dx = torch::empty_like(x), dz = add ? torch::empty_like(x) : torch::Tensor();
    torch::Tensor dWeight = torch::empty_like(weight), dBias = torch::empty_like(bias);
    const torch::Tensor workspace = bytes(s.backward, x);
    const float one = 1.f, zero = 0.f;
    check(cudnnBatchNormalizationBackwardEx(
              h, kMode, opsFor(add), &one, &zero, &one, &zero, d.x(), x.data_ptr(), d.x(),
              y.data_ptr(), d.x(), dy.data_ptr(), add ? d.x() : nullptr,
              add ? dz.data_ptr() : nullptr, d.x(), dx.data_ptr(), d.bn(), weight.data_ptr(),
              bias.data_ptr(), dWeight.data_ptr(), dBias.data_ptr(), eps, saveMean.data_ptr(),
              saveInvVar.data_ptr(), d.relu(), workspace.data_ptr(), s.backward,
              reserve.data_ptr(), static_cast<size_t>(reserve.numel())),
          "cudnnBatchNormalizationBackwardEx");
    return {dx, dz, dWeight, dBias, torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

// The (dtype, channels, add) cases cuDNN was asked about once: whether it
// fuses them. Asked with a real call on a small batch, as a shape of the
// kind cuDNN refuses (CUDNN_STATUS_NOT_SUPPORTED) is refused at the call,
// not at the workspace query.
class SupportCache {
 public:
  bool fuses(const torch::Tensor& x, bool add, const torch::Tensor& weight) {
    const auto key = std::make_tuple(static_cast<int>(x.scalar_type()), x.size(1), add);
    std::lock_guard<std::mutex> lock(mu_);
    if (yes_.count(key)) return true;
    if (no_.count(key)) return false;
    torch::NoGradGuard noGrad;
    const torch::Tensor probe =
        torch::rand({2, x.size(1), 4, 4}, x.options()).contiguous(at::MemoryFormat::ChannelsLast);
    torch::Tensor mean = torch::zeros_like(weight), var = torch::ones_like(weight);
    torch::Tensor y, saveMean, saveInvVar, reserve;
    const cudnnStatus_t st =
        forwardTraining(probe, add ? probe : torch::Tensor(), torch::ones_like(weight),
                        torch::zeros_like(weight), mean, var, 0.1, 1e-5, y, saveMean, saveInvVar,
                        reserve);
    if (st == CUDNN_STATUS_SUCCESS) {
      yes_.insert(key);
      return true;
    }
    no_.insert(key);
    log().info("model.fused_bn: cuDNN does not fuse BatchNorm{}+ReLU for {} with {} channels "
               "({}); those layers run unfused",
               add ? "+add" : "", c10::toString(x.scalar_type()), x.size(1), statusName(st));
    return false;
  }

 private:
  std::mutex mu_;
  std::set<std::tuple<int, int64_t, bool>> yes_, no_;
};

SupportCache& supportCache() {
  static SupportCache cache;
  return cache;
}

}  // namespace

bool fusedBatchNormAvailable() { return true; }

torch::Tensor batchNormRelu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                            const torch::Tensor& z) {
  const auto& o = bn.options;
  const bool half = x.scalar_type() == torch::kHalf || x.scalar_type() == torch::kBFloat16;
  if (!bn.is_training() || !x.is_cuda() || x.dim() != 4 || !half || x.size(1) % 4 != 0 ||
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
  if (!supportCache().fuses(x, z.defined(), bn.weight)) return {};
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
