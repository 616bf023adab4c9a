#include "bigbatch/models/scripted_model.h"

#include <torch/csrc/jit/runtime/graph_executor.h>

#include <sstream>

#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/ckpt/torchscript_file.h"
#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

// The interpreter's message ends with the error itself ("RuntimeError:
// mat1 and mat2 shapes cannot be multiplied ..."), after the traceback.
std::string lastLine(const std::string& text) {
  const size_t end = text.find_last_not_of(" \n");
  if (end == std::string::npos) return text;
  const size_t newline = text.rfind('\n', end);
  const size_t begin = newline == std::string::npos ? 0 : newline + 1;
  return text.substr(begin, end + 1 - begin);
}

std::string describe(const c10::FunctionSchema& schema) {
  std::ostringstream out;
  out << schema;
  return out.str();
}

// forward(self, x: Tensor) -> Tensor, as a classifier's.
void checkForward(const torch::jit::Module& module, const std::string& path) {
  const auto method = module.find_method("forward");
  BIGBATCH_REQUIRE(method.has_value(), InvalidArgument,
                   "model.path '{}': the TorchScript module has no forward method; define "
                   "forward(self, images) returning the logits",
                   path);
  const c10::FunctionSchema& schema = method->function().getSchema();
  const auto& args = schema.arguments();  // self first
  const bool oneTensor = args.size() == 2 && args[1].type()->isSubtypeOf(*c10::TensorType::get());
  BIGBATCH_REQUIRE(oneTensor, InvalidArgument,
                   "model.path '{}': forward is {}; bigbatch calls forward(images) with one "
                   "tensor [N, C, H, W] and nothing else — give forward exactly one Tensor "
                   "argument (defaults for others are not passed)",
                   path, describe(schema));
  const auto& returns = schema.returns();
  BIGBATCH_REQUIRE(returns.size() == 1 && returns[0].type()->isSubtypeOf(*c10::TensorType::get()),
                   InvalidArgument,
                   "model.path '{}': forward returns {}; it must return the logits tensor "
                   "[N, classes]",
                   path, returns.empty() ? std::string("nothing") : returns[0].type()->str());
}

void checkTensors(const torch::jit::Module& module, const std::string& path) {
  int64_t trainable = 0;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (p.value.requires_grad()) ++trainable;
    BIGBATCH_REQUIRE(!p.value.is_floating_point() || p.value.scalar_type() == torch::kFloat,
                     InvalidArgument,
                     "model.path '{}': parameter '{}' is {}; bigbatch keeps fp32 master weights "
                     "and computes in 16 bits with amp.precision — save the module in fp32 "
                     "(model.float())",
                     path, p.name, c10::toString(p.value.scalar_type()));
  }
  BIGBATCH_REQUIRE(trainable > 0, InvalidArgument,
                   "model.path '{}': no parameter of the module requires grad, so there is "
                   "nothing to train; save it without freezing every parameter "
                   "(requires_grad_(True))",
                   path);
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    BIGBATCH_REQUIRE(!b.value.is_floating_point() || b.value.scalar_type() == torch::kFloat,
                     InvalidArgument,
                     "model.path '{}': buffer '{}' is {}; save the module in fp32 (model.float())",
                     path, b.name, c10::toString(b.value.scalar_type()));
  }
}

}  // namespace

ScriptedClassifierImpl::ScriptedClassifierImpl(const std::string& path)
    : path_(path), module_(loadTorchScript(path, "model.path")) {
  checkForward(module_, path_);
  checkTensors(module_, path_);
  mirror(*this, module_, "");
  module_.train(is_training());
}

// Each TorchScript submodule gets a plain holder under its own name; each
// holder registers its module's own parameters and buffers, so the dotted
// names of named_parameters() are the TorchScript module's.
void ScriptedClassifierImpl::mirror(torch::nn::Module& into, const torch::jit::Module& from,
                                    const std::string& prefix) {
  // A tensor reachable twice (a submodule used in two places, tied
  // weights) is registered once, under its first name, as PyTorch's
  // named_parameters() lists it: one gradient, one bucket slot, one update;
  // its other names are kept as aliases, which state dicts carry as
  // PyTorch's state_dict() does. A frozen parameter (requires_grad off:
  // fine-tuning the rest) is held as a buffer — saved, checkpointed and
  // checksummed, never exchanged or updated, as PyTorch DDP and its
  // optimizers skip it — and named in frozen_: not averaged as statistics.
  auto firstTime = [&](const torch::Tensor& t, const std::string& name) {
    const auto [it, inserted] = registered_.emplace(t.unsafeGetTensorImpl(), prefix + name);
    if (!inserted) aliases_.emplace_back(prefix + name, it->second);
    return inserted;
  };
  for (const auto& p : from.named_parameters(/*recurse=*/false)) {
    if (!firstTime(p.value, p.name)) continue;
    if (p.value.requires_grad()) {
      into.register_parameter(p.name, p.value);
    } else {
      into.register_buffer(p.name, p.value);
      frozen_.push_back(prefix + p.name);
    }
  }
  for (const auto& b : from.named_buffers(/*recurse=*/false)) {
    if (!firstTime(b.value, b.name)) continue;
    into.register_buffer(b.name, b.value);
    buffers_.push_back(BufferSlot{from, b.name, b.value});
  }
  for (const auto& child : from.named_children()) {
    auto holder = std::make_shared<torch::nn::Module>();
    mirror(*holder, child.value, prefix + child.name + ".");
    into.register_module(child.name, holder);
  }
}

torch::Tensor ScriptedClassifierImpl::forward(torch::Tensor x) {
  const torch::jit::GraphOptimizerEnabledGuard interpreted(false);
  c10::IValue out = module_.forward({std::move(x)});
  takeBackReplacedBuffers();
  return out.toTensor();
}

void ScriptedClassifierImpl::takeBackReplacedBuffers() {
  for (BufferSlot& slot : buffers_) {
    const c10::IValue now = slot.owner.attr(slot.name);
    if (!now.isTensor()) continue;
    const torch::Tensor& t = now.toTensor();
    if (t.unsafeGetTensorImpl() == slot.registered.unsafeGetTensorImpl()) continue;
    torch::NoGradGuard noGrad;
    slot.registered.copy_(t);
    slot.owner.setattr(slot.name, slot.registered);
  }
}

void ScriptedClassifierImpl::train(bool on) {
  torch::nn::Module::train(on);
  module_.train(on);
}

void ScriptedClassifierImpl::saveForEvaluation(const std::string& path) {
  // A copy on the CPU, so Python loads it on any machine without a
  // map_location, and so the training module keeps its mode and device.
  torch::jit::Module copy = module_.clone();
  copy.to(torch::kCPU);
  copy.train(false);
  saveTorchScript(copy, path);
}

void ScriptedClassifierImpl::checkLogits(int64_t channels, int64_t height, int64_t width,
                                         int64_t classes) {
  const bool wasTraining = is_training();
  train(false);
  torch::Tensor logits;
  std::string failure;
  {
    torch::NoGradGuard noGrad;
    try {
      logits = forward(torch::zeros({2, channels, height, width}));
    } catch (const c10::Error& e) {
      failure = e.what_without_backtrace();
    } catch (const std::exception& e) {  // the interpreter's errors from the module's code
      failure = e.what();
    }
  }
  train(wasTraining);
  BIGBATCH_REQUIRE(failure.empty(), InvalidArgument,
                   "model.path '{}': forward failed on a batch of the data's shape [2, {}, {}, "
                   "{}] on the CPU: {}; make forward take images [N, C, H, W] of this data set "
                   "(and create no tensor on a fixed device)",
                   path_, channels, height, width, lastLine(failure));
  BIGBATCH_REQUIRE(logits.dim() == 2 && logits.size(0) == 2 && logits.size(1) == classes,
                   InvalidArgument,
                   "model.path '{}': forward returned shape {} for a batch of 2 images [2, {}, "
                   "{}, {}]; a classifier of this data set's {} classes returns logits [N, {}]",
                   path_, shapeText(logits), channels, height, width, classes, classes);
}

}  // namespace bigbatch
