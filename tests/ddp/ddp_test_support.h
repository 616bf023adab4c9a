// What the in-process DDP tests share: the input every net is fed (a 4 x 6
// batch that differs by rank), a small net with an unused layer, ranks on
// threads of one process, and the single-process reference gradients.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "bigbatch/comm/in_process_communicator.h"

namespace bigbatch {

inline torch::Tensor inputFor(int rank) {
  return torch::arange(24, torch::kFloat32).reshape({4, 6}).add(rank).mul(0.1);
}

struct Net : torch::nn::Module {
  Net() {
    a = register_module("a", torch::nn::Linear(6, 5));
    b = register_module("b", torch::nn::Linear(5, 3));
    unused = register_module("unused", torch::nn::Linear(2, 2));
  }
  torch::Tensor forward(torch::Tensor x) { return b(torch::relu(a(x))); }
  torch::nn::Linear a{nullptr}, b{nullptr}, unused{nullptr};
};

// One step's backward through DDP: gradients zeroed, the exchange armed,
// sum(net(x)^2) backpropagated, the exchange finished.
template <class Ddp>
void backwardStep(Ddp& ddp, Net& net, const torch::Tensor& x) {
  ddp.zeroGrad();
  ddp.beginBackward(true);
  net.forward(x).pow(2).sum().backward();
  ddp.finishBackward();
}

// Runs fn(rank, comm, net) on `n` threads with nets built beforehand from
// `seeds[rank]` (libtorch's RNG is global, so not inside the threads).
inline void withRanks(int n, std::vector<int> seeds,
               const std::function<void(int, Communicator&, Net&)>& fn) {
  std::vector<std::shared_ptr<Net>> nets;
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(seeds[r]);
    nets.push_back(std::make_shared<Net>());
  }
  auto comms = makeInProcessGroup(n);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(n);
  for (int r = 0; r < n; ++r) {
    comms[r]->setTimeoutMs(10000);
    threads.emplace_back([&, r] {
      try {
        fn(r, *comms[r], *nets[r]);
      } catch (...) {
        errors[r] = std::current_exception();
        comms[r]->postError("rank failed");
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// The gradients of the sum of `n` ranks' losses in one process, from a Net
// seeded with 7; an unused parameter's is undefined.
inline std::vector<torch::Tensor> referenceGradients(int n) {
  torch::manual_seed(7);
  Net ref;
  torch::Tensor total = torch::zeros({});
  for (int r = 0; r < n; ++r) total = total + ref.forward(inputFor(r)).pow(2).sum();
  total.backward();
  std::vector<torch::Tensor> want;
  for (auto& p : ref.parameters()) want.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return want;
}

}  // namespace bigbatch
