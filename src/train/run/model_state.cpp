#include "run/model_state.h"

#include <algorithm>
#include <map>

#include "bigbatch/common/error.h"

namespace bigbatch::train_detail {

namespace {
bool isFrozen(const std::vector<std::string>& frozen, const std::string& name) {
  return std::find(frozen.begin(), frozen.end(), name) != frozen.end();
}
}  // namespace

NamedTensors frozenTensors(torch::nn::Module& model, const std::vector<std::string>& frozen) {
  NamedTensors out;
  for (const auto& item : model.named_buffers()) {
    if (isFrozen(frozen, item.key())) out.emplace_back(item.key(), item.value().detach().clone());
  }
  return out;
}

void restoreModel(torch::nn::Module& model, const NamedTensors& params,
                  const NamedTensors& buffers, const std::string& origin,
                  const std::vector<std::string>& frozen) {
  torch::NoGradGuard noGrad;
  // Frozen parameters: in `params` (saved once), or in an older
  // checkpoint's per-rank buffers.
  NamedTensors trainable, statistics;
  for (const auto& [name, t] : params) {
    if (isFrozen(frozen, name)) statistics.emplace_back(name, t);
    else trainable.emplace_back(name, t);
  }
  for (const auto& [name, t] : buffers) {
    const bool have = std::any_of(statistics.begin(), statistics.end(),
                                  [&](const auto& e) { return e.first == name; });
    if (!have) statistics.emplace_back(name, t);
  }
  const bool frozenOnly = params.empty();  // a rank's own buffers: frozen ones stay
  auto copyAll = [&](const NamedTensors& from, auto named, const char* what, bool skipFrozen) {
    std::map<std::string, torch::Tensor> byName(from.begin(), from.end());
    for (auto& item : named) {
      if (skipFrozen && isFrozen(frozen, item.key()) && !byName.count(item.key())) continue;
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
  if (!params.empty()) copyAll(trainable, model.named_parameters(), "parameter", false);
  copyAll(statistics, model.named_buffers(), "buffer", frozenOnly);
}

NamedTensors namedTensors(const torch::OrderedDict<std::string, torch::Tensor>& dict) {
  NamedTensors out;
  for (const auto& item : dict) out.emplace_back(item.key(), item.value().detach());
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

NamedTensors carriedCodecState(const std::vector<NamedTensors>& ranks, int worldSize) {
  NamedTensors out;
  if (ranks.empty()) return out;
  auto isError = [](const std::string& name) { return name.find("/error/") != std::string::npos; };
  std::map<std::string, torch::Tensor> sums;
  std::vector<std::string> order;
  for (const NamedTensors& rank : ranks) {
    for (const auto& [name, value] : rank) {
      if (!isError(name)) continue;
      auto it = sums.find(name);
      if (it == sums.end()) {
        sums.emplace(name, value.to(torch::kDouble));
        order.push_back(name);
      } else {
        it->second = it->second + value.to(torch::kDouble);
      }
    }
  }
  for (const auto& [name, value] : ranks[0]) {
    if (!isError(name)) out.emplace_back(name, value);
  }
  for (const std::string& name : order) {
    out.emplace_back(name, (sums[name] / worldSize).to(torch::kFloat));
  }
  return out;
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

std::string packRankState(torch::nn::Module& model, const NamedTensors& codecState,
                          const std::vector<std::string>& frozen) {
  c10::Dict<std::string, at::Tensor> own;
  for (const auto& item : model.named_buffers()) {
    if (isFrozen(frozen, item.key())) continue;  // saved once, with the parameters
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
