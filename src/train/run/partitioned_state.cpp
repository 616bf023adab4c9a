#include "bigbatch/train/partitioned_state.h"

#include <map>

#include "bigbatch/common/error.h"

namespace bigbatch {

std::unique_ptr<Optimizer> makeRunOptimizer(torch::nn::Module& model, DistributedDataParallel& ddp,
                                            const OptimizerOptions& options) {
  if (!ddp.partitioned()) return makeOptimizer(namedParameters(model), options);
  std::vector<NamedParameter> slices;
  ShardReduction reduction;
  reduction.layers = ddp.parameterNames().size();
  for (const ParameterShard& s : ddp.shards()) {
    torch::Tensor w = s.weight;
    w.mutable_grad() = s.grad;
    slices.push_back({s.name, w, s.fullDim});
    reduction.layerOf.push_back(s.param);
  }
  reduction.sum = [&job = ddp.collectives()](std::vector<double>& values) {
    values = job.allreduceSum(values);
  };
  std::unique_ptr<Optimizer> optimizer = makeOptimizer(std::move(slices), options);
  optimizer->partition(std::move(reduction));
  return optimizer;
}

NamedTensors wholeOptimizerState(const Optimizer& optimizer, DistributedDataParallel& ddp) {
  if (!ddp.partitioned()) return optimizer.state();
  std::map<std::string, torch::Tensor> mine;
  for (auto& [name, t] : optimizer.state()) mine.emplace(name, t);
  NamedTensors out;
  for (const std::string& buffer : optimizer.bufferNames()) {
    std::vector<torch::Tensor> slices;
    for (const ParameterShard& s : ddp.shards()) slices.push_back(mine.at(s.name + "." + buffer));
    std::vector<torch::Tensor> whole = ddp.gatherShards(slices);
    for (size_t p = 0; p < whole.size(); ++p) {
      out.emplace_back(ddp.parameterNames()[p] + "." + buffer, whole[p]);
    }
  }
  out.emplace_back("step", mine.at("step"));
  return out;
}

void loadWholeOptimizerState(Optimizer& optimizer, DistributedDataParallel& ddp,
                             const NamedTensors& state) {
  if (!ddp.partitioned()) {
    optimizer.loadState(state);
    return;
  }
  std::map<std::string, torch::Tensor> whole(state.begin(), state.end());
  NamedTensors slices;
  torch::NoGradGuard noGrad;
  for (const std::string& buffer : optimizer.bufferNames()) {
    for (const ParameterShard& s : ddp.shards()) {
      const std::string name = s.name + "." + buffer;
      auto it = whole.find(name);
      BIGBATCH_REQUIRE(it != whole.end(), InvalidArgument,
                       "optimizer state has no '{}' (is it from another optimizer or model?)",
                       name);
      const torch::Tensor& p = s.parameter;
      BIGBATCH_REQUIRE(it->second.sizes() == p.sizes(), InvalidArgument,
                       "optimizer state '{}' has shape {} but this model needs {}", name,
                       c10::str(it->second.sizes()), c10::str(p.sizes()));
      // The slice is in the parameter's memory order: lay the whole tensor
      // out with the parameter's strides first — where the slice lives (the
      // host, when the model is on a GPU and its exchange staged).
      torch::Tensor laid =
          torch::empty_strided(p.sizes(), p.strides(), p.options().device(s.weight.device()));
      laid.copy_(it->second);
      slices.emplace_back(name,
                          laid.as_strided({p.numel()}, {1}).narrow(0, s.begin, s.numel).clone());
    }
  }
  auto step = whole.find("step");
  BIGBATCH_REQUIRE(step != whole.end(), InvalidArgument, "optimizer state has no 'step'");
  // Entries this optimizer does not know are refused, as Optimizer::loadState does.
  for (const auto& [name, tensor] : whole) {
    bool known = name == "step";
    for (const std::string& buffer : optimizer.bufferNames()) {
      for (const std::string& param : ddp.parameterNames()) known |= name == param + "." + buffer;
    }
    BIGBATCH_REQUIRE(known, InvalidArgument,
                     "optimizer state has an entry this optimizer does not know, '{}' (is it "
                     "from another optimizer or model?)",
                     name);
  }
  slices.emplace_back("step", step->second);
  optimizer.loadState(slices);
}

}  // namespace bigbatch
