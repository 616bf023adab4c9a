// What a captured CUDA graph (step_graph.h) is bound to: the storage of
// every tensor its kernels read or write — the parameters, their
// gradients, the optimizer's state, the static input. A graph replays the
// addresses it was captured with; a tensor re-allocated since (a
// parameter whose storage a script or a load replaced, a state tensor
// grown) leaves the graph reading and writing memory that is no longer
// that tensor's, silently. PyTorch's own graphs have the same contract
// ("the memory addresses of a graph's inputs must not change", its CUDA
// Graphs notes); here the step checks it before each replay and stops
// with the tensor's name instead.
//
// Internal to src/train. Threading: one thread (the training thread).
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

namespace bigbatch::train_detail {

class GraphBindings {
 public:
  using Named = std::vector<std::pair<std::string, torch::Tensor>>;

  GraphBindings() = default;
  // The tensors as they are now (at capture); an undefined tensor is bound
  // as undefined.
  explicit GraphBindings(const Named& tensors);

  // "" when every tensor of `now` (the same names, in the same order) has
  // the storage, shape and type it was captured with; else what changed
  // first, named: e.g. "the storage of layer1.0.conv1.weight moved".
  std::string changed(const Named& now) const;

 private:
  struct Binding {
    std::string name;
    const void* data = nullptr;
    std::vector<int64_t> sizes;
    torch::ScalarType type = torch::kFloat;
    bool defined = false;
  };
  static Binding bind(const std::string& name, const torch::Tensor& t);
  std::vector<Binding> bound_;
};

}  // namespace bigbatch::train_detail
