#include "bigbatch/train/config_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/amp/precision.h"
#include "bigbatch/collectives/allreduce_selector.h"
#include "bigbatch/common/error.h"
#include "bigbatch/models/fused_batch_norm.h"
#include "step/gpu_exchange.h"
#include "recipe/recipe.h"
#include "recipe/recipe_keys.h"
#include "run/run_device.h"
#include "training_data.h"

namespace bigbatch {

// The keys are declared once, with where each goes in the run's recipe, in
// src/train/recipe/recipe_keys.cpp; the schema is that table's first column.
std::vector<ConfigField> trainingConfigSchema() {
  std::vector<ConfigField> all;
  for (const auto& k : train_detail::recipeKeys()) all.push_back(k.field);
  return all;
}

Config defaultTrainingConfig() {
  Config c(trainingConfigSchema());
  c.ignoreTable("tune");  // a recipe's search space, read by `bigbatch tune`
  return c;
}

namespace {

// The model's keys that apply to one model only, and its stages.
void checkModelKeys(const Config& c) {
  const auto widths = c.getIntList("model.widths");
  const auto blocks = c.getIntList("model.blocks");
  if (c.getInt("model.head_pool") > 1 && c.getString("model.name") != "cnn") {
    BIGBATCH_THROW(InvalidArgument,
                   "model.head_pool = {} applies to model.name = cnn only (got {}); leave it 1",
                   c.getInt("model.head_pool"), c.getString("model.name"));
  }
  if (c.getInt("model.hidden") > 0 && c.getString("model.name") != "cnn") {
    BIGBATCH_THROW(InvalidArgument, "model.hidden = {} applies to model.name = cnn only (got {})",
                   c.getInt("model.hidden"), c.getString("model.name"));
  }
  const std::string name = c.getString("model.name");
  if (name == "torchscript") {
    BIGBATCH_REQUIRE(!c.getString("model.path").empty(), InvalidArgument,
                     "model.name = \"torchscript\" needs model.path, the module file saved "
                     "from Python with torch.jit.script(model).save(FILE)");
    // K-FAC reads each layer's inputs and output gradients through the
    // zoo's layer taps (models/layer_tap.h); TorchScript code calls its
    // convolutions and linear layers directly, out of the taps' sight.
    BIGBATCH_REQUIRE(!c.getBool("optim.kfac"), InvalidArgument,
                     "optim.kfac with model.name = \"torchscript\": K-FAC gathers its factors "
                     "through the built-in models' layer taps, which a TorchScript module's "
                     "code does not call; set optim.kfac = false (LARS or LAMB train large "
                     "batches without it)");
    return;
  }
  BIGBATCH_REQUIRE(c.getString("model.path").empty(), InvalidArgument,
                   "model.path = '{}' is read by model.name = \"torchscript\" only (got {}); "
                   "set model.name = \"torchscript\" or drop model.path",
                   c.getString("model.path"), name);
  if (c.getString("model.name") != "resnet50" &&
      (widths.empty() || widths.size() != blocks.size())) {
    BIGBATCH_THROW(InvalidArgument,
                   "model.widths has {} stages and model.blocks {}; give both, of equal length",
                   widths.size(), blocks.size());
  }
}

// Gradient compression, with what it cannot work beside.
void checkCompression(const Config& c) {
  if (const std::string codec = c.getString("ddp.compression"); codec != "none") {
    BIGBATCH_REQUIRE(!c.getBool("optim.kfac"), InvalidArgument,
                     "ddp.compression = {} with optim.kfac: K-FAC preconditions the exact summed "
                     "gradient its factors were gathered for; set one of them off",
                     codec);
    BIGBATCH_REQUIRE(c.getString("ddp.partition") == "none", InvalidArgument,
                     "ddp.compression = {} with ddp.partition = optimizer: compression works on "
                     "whole gradient matrices, the partition reduce-scatters slices; set "
                     "ddp.partition = none",
                     codec);
  }
}

// The batch, its BatchNorm groups, and the schedules' lists and warmup.
void checkBatchAndSchedules(const Config& c) {
  if (c.getInt("train.batch_size") < c.getInt("train.virtual_workers")) {
    BIGBATCH_THROW(InvalidArgument,
                   "train.virtual_workers = {} exceeds train.batch_size = {}: each BatchNorm "
                   "group needs at least one image; lower train.virtual_workers",
                   c.getInt("train.virtual_workers"), c.getInt("train.batch_size"));
  }
  if (c.getFloatList("schedule.momentum_epochs").size() !=
      c.getFloatList("schedule.momentum_values").size()) {
    BIGBATCH_THROW(InvalidArgument,
                   "schedule.momentum_epochs has {} entries and schedule.momentum_values {}; give "
                   "one value per epoch",
                   c.getFloatList("schedule.momentum_epochs").size(),
                   c.getFloatList("schedule.momentum_values").size());
  }
  if (c.getIntList("schedule.batch_epochs").size() !=
      c.getIntList("schedule.batch_factors").size()) {
    BIGBATCH_THROW(InvalidArgument,
                   "schedule.batch_epochs has {} entries and schedule.batch_factors {}; give one "
                   "factor per epoch",
                   c.getIntList("schedule.batch_epochs").size(),
                   c.getIntList("schedule.batch_factors").size());
  }
  if (c.getFloat("schedule.warmup_epochs") > static_cast<double>(c.getInt("train.epochs"))) {
    BIGBATCH_THROW(InvalidArgument, "schedule.warmup_epochs = {} exceeds train.epochs = {}",
                   c.getFloat("schedule.warmup_epochs"), c.getInt("train.epochs"));
  }
}

void checkPipelineThreads(const Config& c) {
  const int64_t r = c.getInt("data.read_threads"), d = c.getInt("data.decode_threads"),
                a = c.getInt("data.augment_threads");
  if ((r == 0 || d == 0 || a == 0) && (r + d + a) != 0) {
    BIGBATCH_THROW(InvalidArgument,
                   "data.read_threads = {}, data.decode_threads = {}, data.augment_threads = {}: "
                   "set all three >= 1 (threaded pipeline) or all 0 (inline)",
                   r, d, a);
  }
}

// run.device: "cuda" is refused before any worker starts by a CPU build, or
// where no GPU is visible; fp16 compute and NCCL need it.
void checkDevice(const Config& c) {
  const bool onCuda = c.getString("run.device") == "cuda";
  if (onCuda) train_detail::checkCudaAvailable();
  if (c.getString("amp.precision") == "fp16") {
    checkPrecisionSupported(Precision::kFp16,
                            onCuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU);
  }
  if (c.getString("ddp.gpu_exchange") == "nccl") {
    BIGBATCH_REQUIRE(onCuda, InvalidArgument,
                     "ddp.gpu_exchange = \"nccl\" sums gradients on GPUs, but run.device = "
                     "\"{}\"; set run.device = \"cuda\", or ddp.gpu_exchange = \"auto\"",
                     c.getString("run.device"));
    train_detail::checkNcclBuilt();
  }
}

// The gradient exchange: its allreduce table, buckets and the partitioned
// optimizer, with what it cannot work beside.
void checkExchange(const Config& c) {
  if (!c.getString("comm.allreduce_table").empty()) {
    parseAllreduceRules(c.getString("comm.allreduce_table"));  // throws naming the bad entry
  }
  if (const int64_t fusion = c.getInt("ddp.fusion_bytes"); fusion > 0 && fusion < 4) {
    BIGBATCH_THROW(InvalidArgument,
                   "ddp.fusion_bytes = {} holds no float: give at least 4 bytes, or \"auto\"",
                   fusion);
  }
  if (c.getString("ddp.partition") == "optimizer") {
    train_detail::checkPartitionedExchange(c.getString("ddp.gpu_exchange"));
    if (c.getBool("optim.kfac")) {
      BIGBATCH_THROW(InvalidArgument,
                     "ddp.partition = optimizer cannot be combined with optim.kfac = true (K-FAC "
                     "needs every layer's whole gradient on one rank); set one of them off");
    }
    if (!c.getBool("optim.fused")) {
      BIGBATCH_THROW(InvalidArgument,
                     "ddp.partition = optimizer needs the fused optimizer (optim.fused = true): "
                     "its per-layer norms are summed from every rank's slices in one pass");
    }
  }
}

// run.cuda_graph: what a captured step cannot hold, each named with the
// key that asks for it. More ranks than one under mpirun are refused when
// the run starts (the world size is known then).
void checkCudaGraph(const Config& c) {
  if (!c.getBool("run.cuda_graph")) return;
  const auto refuse = [](bool bad, const std::string& why) {
    BIGBATCH_REQUIRE(!bad, InvalidArgument, "run.cuda_graph = true cannot capture the step: {}; "
                     "set run.cuda_graph = false (docs/GPU.md, \"The single-GPU step\")", why);
  };
  refuse(c.getBool("optim.kfac"),
         "optim.kfac taps every layer's activations and gradients on the host");
  refuse(c.getInt("train.virtual_workers") > 1,
         "train.virtual_workers > 1 splits each batch into BatchNorm groups by host-side slicing");
  refuse(c.getString("model.name") == "torchscript",
         "model.name = \"torchscript\": a scripted module may run host code in its forward");
  refuse(c.getInt("train.accumulation_steps") > 1,
         "train.accumulation_steps > 1: the graph holds one micro-batch per step");
  refuse(c.getInt("run.workers") > 1,
         "run.workers > 1: the gradient exchange between ranks is not captured (yet)");
  refuse(c.getString("ddp.compression") != "none",
         "ddp.compression: the codec's memory follows the loss scale on the host");
  refuse(!c.getBool("optim.fused"),
         "optim.fused = false: the per-tensor optimizer reads its norms on the host");
  refuse(c.getString("train.nonfinite") == "skip",
         "train.nonfinite = skip restores the BatchNorm statistics from a copy made per step");
  refuse(!c.getIntList("schedule.batch_epochs").empty(),
         "a batch-size schedule (schedule.batch_epochs) changes the batch the graph was captured "
         "with");
  refuse(c.getString("run.device") != "cuda", "run.device = \"" + c.getString("run.device") +
                                                  "\": a CUDA graph needs run.device = \"cuda\"");
}

// model.fused_bn = "on": refused where nothing can fuse ("auto" never is).
// The layout and precision first: they hold on every build.
void checkFusedBatchNorm(const Config& c) {
  if (c.getString("model.fused_bn") != "on") return;
  BIGBATCH_REQUIRE(c.getString("amp.precision") == "fp16", InvalidArgument,
                   "model.fused_bn = \"on\" needs amp.precision = \"fp16\": cuDNN fuses "
                   "BatchNorm+ReLU on half-precision tensors only (its BN_ACTIVATION ops), and "
                   "amp.precision = \"{}\"; set amp.precision = \"fp16\", or model.fused_bn = "
                   "\"auto\" (the unfused layers at {})",
                   c.getString("amp.precision"), c.getString("amp.precision"));
  BIGBATCH_REQUIRE(c.getBool("model.channels_last"), InvalidArgument,
                   "model.fused_bn = \"on\" needs model.channels_last = true: cuDNN fuses "
                   "BatchNorm+ReLU on NHWC tensors only; set model.channels_last = true, or "
                   "model.fused_bn = \"auto\"");
  BIGBATCH_REQUIRE(fusedBatchNormAvailable(), InvalidArgument,
                   "model.fused_bn = \"on\" needs the CUDA build with cuDNN's headers "
                   "(scripts/build-cuda; docs/GPU.md); set model.fused_bn = \"auto\" or \"off\"");
  BIGBATCH_REQUIRE(c.getString("run.device") == "cuda", InvalidArgument,
                   "model.fused_bn = \"on\" fuses cuDNN's BatchNorm on a GPU, but run.device = "
                   "\"{}\"; set run.device = \"cuda\", or model.fused_bn = \"auto\"",
                   c.getString("run.device"));
}

}  // namespace

// The rules between keys, before any worker starts; each throws
// InvalidArgument naming the keys and the fix.
const std::vector<std::string>& recipeRelativeKeys() {
  static const std::vector<std::string> keys = {"model.path", "data.path"};
  return keys;
}

std::string resolvedRecipeText(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    BIGBATCH_THROW(IoError, "cannot open config file '{}': {}; pass an existing TOML file "
                   "(recipes live in configs/)", path, std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  toml::table table;
  try {
    table = toml::parse(text.str(), path);
  } catch (const toml::parse_error&) {
    return text.str();  // mergeToml names the error, with its line
  }
  const std::filesystem::path folder = std::filesystem::absolute(path).parent_path();
  bool changed = false;
  for (const std::string& key : recipeRelativeKeys()) {
    const size_t dot = key.find('.');
    auto* section = table[key.substr(0, dot)].as_table();
    auto* value = section ? (*section)[key.substr(dot + 1)].as_string() : nullptr;
    if (value == nullptr || value->get().empty()) continue;
    const std::filesystem::path given(value->get());
    if (given.is_absolute()) continue;
    *value = (folder / given).lexically_normal().string();
    changed = true;
  }
  if (!changed) return text.str();
  std::ostringstream out;
  out << table;
  return out.str();
}

void mergeRecipeFile(Config& config, const std::string& path) {
  config.mergeToml(resolvedRecipeText(path), path);
}

void validateTrainingConfig(const Config& c) {
  checkModelKeys(c);
  checkCompression(c);
  checkBatchAndSchedules(c);
  checkPipelineThreads(c);
  checkCudaGraph(c);
  checkFusedBatchNorm(c);
  checkDevice(c);
  train_detail::checkDecodeChoice(train_detail::bindRecipeKeys(c).data, c.getString("run.device"));
  checkExchange(c);
  if (c.getString("amp.loss_scaling") != "off") {
    DynamicLossScaler check(train_detail::lossScalerOptions(c));  // throws naming the bad option
  }
}

void validateTrainingData(const Config& config) {
  train_detail::checkTrainingDataOpens(train_detail::dataOptionsFor(config));
}

std::string describeConfigSchema(const std::vector<ConfigField>& schema, bool markdown) {
  std::string out;
  if (markdown) out += "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const auto& f : schema) {
    std::string allowed;
    if (!f.choices.empty() && f.type == ConfigType::kString) {
      allowed = fmt::format("{}", fmt::join(f.choices, ", "));
    } else if (f.min || f.max) {
      allowed = fmt::format(
          "{}{} .. {}", f.choices.empty() ? "" : fmt::format("{}, ", fmt::join(f.choices, ", ")),
          formatConfigBound(f, f.min, "-inf"), formatConfigBound(f, f.max, "inf"));
    }
    const std::string type = f.type == ConfigType::kInt       ? "int"
                             : f.type == ConfigType::kFloat   ? "float"
                             : f.type == ConfigType::kBool    ? "bool"
                             : f.type == ConfigType::kString  ? "string"
                             : f.type == ConfigType::kIntList ? "int list"
                                                              : "float list";
    if (markdown) {
      out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", f.key, type,
                         formatConfigValue(f.defaultValue), allowed, f.help);
    } else {
      out += fmt::format("{:<30} {:<7} {:<18} {:<28} {}\n", f.key, type,
                         formatConfigValue(f.defaultValue), allowed, f.help);
    }
  }
  return out;
}

}  // namespace bigbatch
