// A model the user wrote in PyTorch: a TorchScript module file
// (model.name = "torchscript", model.path = FILE) trained as bigbatch's own.
//
// The module's parameters and buffers are the model's, under the module's
// own names (`conv1.weight`, `blocks.0.se.reduce.bias`): a tree of plain
// torch::nn::Module holders mirrors the TorchScript module tree and
// registers the very same tensors (a tensor reachable twice, once; a
// parameter that does not require grad as a buffer: frozen), so the DDP hooks, buckets,
// optimizers, BatchNorm averaging, checkpoints and state dicts see an ordinary module, and every
// in-place update (an optimizer step, set_data() for device and memory-format moves, BatchNorm's
// running statistics) is seen by the TorchScript code that runs forward. A buffer the module's code
// replaces instead of updating in place (`self.n = self.n + 1`) is copied back into the registered
// tensor after each forward.
//
// forward runs in TorchScript's interpreter with the graph optimizer off:
// no profiling runs and no re-specialisation when a batch changes shape (the
// last, smaller batch; evaluation's batches), so the first epoch and the
// fusion autotuner's and `tune`'s measurements time the same code as every
// later step, and the ops and their gradients are the ones eager PyTorch
// runs (libtorch 1.13 fuses nothing on the CPU; docs/TORCHSCRIPT.md has the
// measurement).
//
// Threading: as any torch::nn::Module — the training thread calls forward.
#pragma once

#include <torch/script.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "bigbatch/models/model_options.h"

namespace bigbatch {

class ScriptedClassifierImpl : public ImageClassifierImpl {
 public:
  // Loads `path` (bigbatch/ckpt/torchscript_file.h's checks) and checks
  // what a model must be: forward takes one tensor and returns one, some
  // parameter requires grad, every floating-point parameter and buffer is
  // fp32 (the master weights; amp.precision computes in 16 bits). Its
  // tensors are mapped to the CPU, whatever device saved them, and moved to
  // run.device with the model, as the zoo's models are. Throws
  // InvalidArgument naming the file, the problem and the fix.
  explicit ScriptedClassifierImpl(const std::string& path);

  torch::Tensor forward(torch::Tensor x) override;
  void train(bool on = true) override;

  // Runs forward on a batch of zeros [2, channels, height, width] in
  // evaluation mode without gradients (nothing is updated) and checks the
  // logits are [2, classes]; throws InvalidArgument naming the file, the
  // shape it got and the fix.
  void checkLogits(int64_t channels, int64_t height, int64_t width, int64_t classes);

  // Writes the TorchScript module with the current weights and buffers to
  // `path` atomically, in evaluation mode (torch.jit.load gives a module
  // that evaluates as the run's final evaluation did: BatchNorm on the
  // running statistics, dropout off), its tensors on the CPU; the model
  // stays as it is.
  void saveForEvaluation(const std::string& path);

  std::vector<std::string> frozenParameterNames() const override { return frozen_; }
  std::vector<std::pair<std::string, std::string>> tensorAliases() const override {
    return aliases_;
  }

  // The TorchScript module; it shares the model's tensors.
  const torch::jit::Module& module() const { return module_; }
  const std::string& path() const { return path_; }

 private:
  // A buffer as the TorchScript code sees it: its owner and attribute name.
  struct BufferSlot {
    torch::jit::Module owner;
    std::string name;
    torch::Tensor registered;
  };
  void mirror(torch::nn::Module& into, const torch::jit::Module& from, const std::string& prefix);
  void takeBackReplacedBuffers();

  std::string path_;
  torch::jit::Module module_;
  std::vector<BufferSlot> buffers_;
  std::unordered_map<const void*, std::string> registered_;  // tensor -> the name it has
  std::vector<std::string> frozen_;                          // parameters held as buffers
  std::vector<std::pair<std::string, std::string>> aliases_;  // second name -> registered name
};

TORCH_MODULE(ScriptedClassifier);

}  // namespace bigbatch
