#include "bigbatch/export/export_weights.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>

#include "bigbatch/ckpt/checkpoint.h"
#include "bigbatch/ckpt/state_dict.h"
#include "bigbatch/common/error.h"
#include "bigbatch/models/scripted_model.h"
#include "bigbatch/train/config_schema.h"

namespace bigbatch {
namespace {

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A checkpoint's weights and evaluation buffers; nullopt when `source` is
// not a checkpoint. `config` gets the checkpoint's config.
std::optional<c10::Dict<std::string, at::Tensor>> checkpointWeights(const std::string& source,
                                                                    Config& config, int64_t& step) {
  Checkpoint k;
  try {
    k = readCheckpoint(source);
  } catch (const InvalidArgument&) {
    return std::nullopt;  // not a checkpoint: a weights file
  }
  bool average = true;
  try {
    config.mergeToml(k.config, source);
    average = config.getBool("train.average_bn_stats");
  } catch (const Error&) {
    average = false;  // a config this version cannot read: rank 0's, as before
  }
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : k.parameters) dict.insert(name, t);
  for (const auto& [name, t] : evaluationBuffers(k, average)) dict.insert(name, t);
  step = k.globalStep;
  return dict;
}

std::string exportTorchScript(const std::string& exportSource, const std::string& source,
                              const std::string& exportTarget) {
  namespace fs = std::filesystem;
  if (fs::is_directory(exportSource)) {
    const fs::path module = fs::path(exportSource) / "model.jit.pt";
    BIGBATCH_REQUIRE(fs::exists(module), IoError,
                     "run directory '{}' holds no model.jit.pt: only a finished run of model.name "
                     "= \"torchscript\" writes one; export OUT.pt for the state dict",
                     exportSource);
    fs::copy_file(module, exportTarget, fs::copy_options::overwrite_existing);
    return fmt::format("copied {} to {} (Python: torch.jit.load(\"{}\"))", module.string(),
                       exportTarget, exportTarget);
  }
  Config config = defaultTrainingConfig();
  int64_t step = 0;
  const auto dict = checkpointWeights(source, config, step);
  BIGBATCH_REQUIRE(dict.has_value(), InvalidArgument,
                   "'{}' is not a checkpoint; OUT.jit.pt is written from a run directory or a "
                   "checkpoint of a model.name = \"torchscript\" run",
                   source);
  BIGBATCH_REQUIRE(config.getString("model.name") == "torchscript", InvalidArgument,
                   "checkpoint '{}' is of model.name = {}, not a TorchScript module; export "
                   "OUT.pt for its state dict",
                   source, config.getString("model.name"));
  ScriptedClassifierImpl model(config.getString("model.path"));
  loadStateDict(model, *dict, source, model.tensorAliases());  // every name and shape
  model.saveForEvaluation(exportTarget);
  return fmt::format(
      "wrote the TorchScript module of {} with checkpoint weights (step {}) to {} (Python: "
      "torch.jit.load(\"{}\"))",
      config.getString("model.path"), step, exportTarget, exportTarget);
}

}  // namespace

std::string exportWeights(const std::string& exportSource, const std::string& exportTarget) {
  std::string source = exportSource;
  if (endsWith(exportTarget, ".jit.pt"))
    return exportTorchScript(exportSource, source, exportTarget);
  if (std::filesystem::is_directory(source)) {
    source = (std::filesystem::path(source) / "model.pt").string();
    BIGBATCH_REQUIRE(std::filesystem::exists(source), IoError,
                     "run directory '{}' holds no model.pt: the run did not finish (only a "
                     "completed run writes its weights)",
                     exportSource);
  }
  Config config = defaultTrainingConfig();
  int64_t step = 0;
  c10::Dict<std::string, at::Tensor> dict;
  std::string what = "weights";
  if (auto weights = checkpointWeights(source, config, step)) {
    dict = std::move(*weights);
    what = fmt::format("checkpoint weights (step {})", step);
    // A TorchScript model's tied tensors under each of their names, as
    // Python's state_dict() has them (the checkpoint holds each once).
    if (config.getString("model.name") == "torchscript" &&
        std::filesystem::exists(config.getString("model.path"))) {
      addAliases(dict, ScriptedClassifierImpl(config.getString("model.path")).tensorAliases());
    }
  } else {
    dict = readStateDict(source);
  }
  writeStateDict(dict, exportTarget);
  return fmt::format("wrote {} tensors of {} to {} (Python: torch.load(\"{}\"))", dict.size(), what,
                     exportTarget, exportTarget);
}

}  // namespace bigbatch
