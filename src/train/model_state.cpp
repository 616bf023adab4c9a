#include "model_state.h"

#include <map>

#include "bigbatch/common/error.h"

namespace bigbatch::train_detail {

void restoreModel(torch::nn::Module& model, const NamedTensors& params,
                  const NamedTensors& buffers, const std::string& origin) {
  torch::NoGradGuard noGrad;
  auto copyAll = [&](const NamedTensors& from, auto named, const char* what) {
    std::map<std::string, torch::Tensor> byName(from.begin(), from.end());
    for (auto& item : named) {
      auto it = byName.find(item.key());
      BIGBATCH_REQUIRE(it != byName.end(), InvalidArgument,
                       "checkpoint '{}' has no {} '{}' that this model needs (another model?)",
                       origin, what, item.key());
      BIGBATCH_REQUIRE(it->second.sizes() == item.value().sizes(), InvalidArgument,
                       "checkpoint '{}': {} '{}' has shape {} but this model's is {}", origin, what,
                       item.key(), c10::str(it->second.sizes()), c10::str(item.value().sizes()));
      item.value().copy_(it->second);
      byName.erase(it);
    }
    BIGBATCH_REQUIRE(byName.empty(), InvalidArgument,
                     "checkpoint '{}' holds {} '{}' that this model does not have (another model?)",
                     origin, what, byName.empty() ? std::string() : byName.begin()->first);
  };
  if (!params.empty()) copyAll(params, model.named_parameters(), "parameter");
  copyAll(buffers, model.named_buffers(), "buffer");
}

NamedTensors namedTensors(const torch::OrderedDict<std::string, torch::Tensor>& dict) {
  NamedTensors out;
  for (const auto& item : dict) out.emplace_back(item.key(), item.value().detach().clone());
  return out;
}

std::vector<torch::Tensor> floatBuffers(torch::nn::Module& model) {
  std::vector<torch::Tensor> out;
  for (const auto& b : model.buffers()) {
    if (b.is_floating_point()) out.push_back(b.detach().clone());
  }
  return out;
}

void restoreFloatBuffers(torch::nn::Module& model, const std::vector<torch::Tensor>& saved) {
  torch::NoGradGuard noGrad;
  size_t i = 0;
  for (auto& b : model.buffers()) {
    if (b.is_floating_point()) b.copy_(saved.at(i++));
  }
}

std::string firstNonFiniteGradient(torch::nn::Module& model) {
  for (const auto& item : model.named_parameters()) {
    const auto& g = item.value().grad();
    if (g.defined() && !torch::isfinite(g).all().item<bool>()) return item.key();
  }
  return "?";
}

namespace {
constexpr const char* kCodecPrefix = "<codec>";
}  // namespace

std::string packRankState(torch::nn::Module& model, const NamedTensors& codecState) {
  c10::Dict<std::string, at::Tensor> own;
  for (const auto& item : model.named_buffers()) {
    own.insert(item.key(), item.value().detach().to(torch::kCPU).contiguous().clone());
  }
  own.insert("<rng>", at::detail::getDefaultCPUGenerator().get_state());
  for (const auto& [name, value] : codecState) {
    own.insert(kCodecPrefix + name, value.detach().to(torch::kCPU).contiguous());
  }
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(own));
  return std::string(bytes.begin(), bytes.end());
}

void unpackRankStates(const std::vector<std::string>& parts, Checkpoint& k) {
  const std::string prefix = kCodecPrefix;
  bool anyCodec = false;
  for (const auto& part : parts) {
    const auto dict =
        torch::pickle_load(std::vector<char>(part.begin(), part.end())).toGenericDict();
    NamedTensors buffers, codec;
    for (const auto& e : dict) {
      const std::string& key = e.key().toStringRef();
      if (key == "<rng>") {
        k.rankRng.push_back(e.value().toTensor());
      } else if (key.rfind(prefix, 0) == 0) {
        codec.emplace_back(key.substr(prefix.size()), e.value().toTensor());
      } else {
        buffers.emplace_back(key, e.value().toTensor());
      }
    }
    anyCodec = anyCodec || !codec.empty();
    k.rankBuffers.push_back(std::move(buffers));
    k.rankCodec.push_back(std::move(codec));
  }
  if (!anyCodec) k.rankCodec.clear();
}

}  // namespace bigbatch::train_detail
