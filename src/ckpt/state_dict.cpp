#include "bigbatch/ckpt/state_dict.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

#include "bigbatch/ckpt/atomic_file.h"
#include "bigbatch/ckpt/torchscript_file.h"
#include "bigbatch/common/error.h"

namespace bigbatch {
std::string shapeText(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

void writeStateDict(const c10::Dict<std::string, at::Tensor>& dict, const std::string& path) {
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(dict));
  writeFileAtomically(path, bytes.data(), bytes.size());
}

void saveStateDict(torch::nn::Module& module, const std::string& path,
                   const TensorAliases& aliases) {
  c10::Dict<std::string, at::Tensor> dict;
  torch::NoGradGuard noGrad;
  for (const auto& item : module.named_parameters()) {
    dict.insert(item.key(), item.value().detach().contiguous().cpu().clone());
  }
  for (const auto& item : module.named_buffers()) {
    dict.insert(item.key(), item.value().detach().contiguous().cpu().clone());
  }
  addAliases(dict, aliases);
  writeStateDict(dict, path);
}

void addAliases(c10::Dict<std::string, at::Tensor>& dict, const TensorAliases& aliases) {
  for (const auto& [alias, name] : aliases) {
    // The same tensor object: pickled once, one storage under both names.
    if (dict.contains(name) && !dict.contains(alias)) dict.insert(alias, dict.at(name));
  }
}

c10::Dict<std::string, at::Tensor> readStateDict(const std::string& path) {
  if (isTorchScriptFile(path)) {
    // A module saved from Python: its named parameters and buffers are the
    // weights (what libtorch 1.13 cannot read from a torch.save file).
    c10::Dict<std::string, at::Tensor> out;
    for (const auto& [name, t] : readTorchScriptTensors(path, "weights file")) out.insert(name, t);
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  BIGBATCH_REQUIRE(in.good(), IoError, "cannot open weights file '{}': {}", path,
                   std::strerror(errno));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    BIGBATCH_THROW(InvalidArgument,
                   "'{}' is not a PyTorch state-dict file (torch.save of a dict of tensors): {}",
                   path, e.what_without_backtrace());
  }
  BIGBATCH_REQUIRE(value.isGenericDict(), InvalidArgument,
                   "'{}' holds a {}, not a dict from names to tensors (save model.state_dict())",
                   path, value.tagKind());
  c10::Dict<std::string, at::Tensor> out;
  for (const auto& entry : value.toGenericDict()) {
    BIGBATCH_REQUIRE(entry.key().isString() && entry.value().isTensor(), InvalidArgument,
                     "'{}' has an entry that is not name -> tensor ({} -> {})", path,
                     entry.key().tagKind(), entry.value().tagKind());
    out.insert(entry.key().toStringRef(), entry.value().toTensor());
  }
  return out;
}

void loadStateDict(torch::nn::Module& module, const std::string& path,
                   const TensorAliases& aliases) {
  loadStateDict(module, readStateDict(path), path, aliases);
}

void loadStateDict(torch::nn::Module& module, const c10::Dict<std::string, at::Tensor>& dict,
                   const std::string& path, const TensorAliases& aliases) {
  std::set<std::string> used;
  // A tied tensor's second name is the model's too (its value is the first's).
  for (const auto& [alias, name] : aliases) used.insert(alias);
  torch::NoGradGuard noGrad;
  auto assign = [&](const std::string& name, torch::Tensor& target) {
    BIGBATCH_REQUIRE(dict.contains(name), InvalidArgument,
                     "'{}' has no tensor '{}' that this model needs; it was saved from another "
                     "architecture (compare model.* in the config)",
                     path, name);
    const at::Tensor src = dict.at(name);
    BIGBATCH_REQUIRE(
        src.sizes() == target.sizes(), InvalidArgument,
        "'{}': tensor '{}' has shape {} in the file but {} in this model; it was saved "
        "from another architecture (compare model.* in the config)",
        path, name, shapeText(src), shapeText(target));
    target.copy_(src);
    used.insert(name);
  };
  for (auto& item : module.named_parameters()) assign(item.key(), item.value());
  for (auto& item : module.named_buffers()) assign(item.key(), item.value());
  for (const auto& entry : dict) {
    BIGBATCH_REQUIRE(used.count(entry.key()), InvalidArgument,
                     "'{}' holds tensor '{}' that this model does not have; it was saved from "
                     "another architecture (compare model.* in the config)",
                     path, entry.key());
  }
}

}  // namespace bigbatch
