#include "bench_step.h"

#include <unistd.h>

#include <climits>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bigbatch/common/config.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/parse_number.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/train/trainer.h"

namespace bigbatch {
namespace {

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

struct Row {
  std::string precision;
  bool resident = true;
  double stepMs = 0, imgS = 0;
  int64_t steps = 0;
};

// One row: a two-epoch run of `o`'s shape at `batch`, its second epoch's
// figures.
Row measure(const BenchStepOptions& o, int batch, const std::string& precision, bool resident,
            const std::string& runDir) {
  BIGBATCH_REQUIRE(precision == "tf32" || precision == "fp32" || precision == "bf16" ||
                       precision == "fp16",
                   InvalidArgument, "bench step: precision '{}' is not one of tf32, fp32, bf16, fp16",
                   precision);
  Config c = defaultTrainingConfig();
  const int64_t samples = static_cast<int64_t>(batch) * o.steps;
  for (const std::string& kv : std::vector<std::string>{
           "model.name=" + o.model, "data.dataset=synthetic",
           fmt::format("data.synthetic_shape=[3,{},{}]", o.size, o.size),
           "data.synthetic_classes=1000", fmt::format("data.train_samples={}", samples),
           fmt::format("data.eval_samples={}", batch), fmt::format("train.batch_size={}", batch),
           "train.epochs=2", "train.eval_every=2", "train.stop_at_target=false",
           "ckpt.every_epochs=0", "data.flip=false", "run.device=" + o.device,
           std::string("amp.precision=") + (precision == "tf32" ? "fp32" : precision),
           std::string("run.cuda_graph=") + (o.cudaGraph ? "true" : "false"),
           "model.fused_bn=" + o.fusedBn, "data.read_threads=2", "data.decode_threads=4",
           "data.augment_threads=8"}) {
    c.set(kv);
  }
  if (o.device == "cuda") c.set(std::string("amp.tf32=") + (precision == "tf32" ? "true" : "false"));
  for (const std::string& kv : o.sets) c.set(kv);
  validateTrainingConfig(c);
  TrainOptions options;
  options.runDir = runDir;
  options.overwrite = true;
  options.verbosity = Verbosity::kQuiet;
  options.residentBatch = resident;
  if (!o.profileOut.empty()) {
    // The timed epoch's steps 3-5 (steps o.steps + 3 ..): past its start.
    options.profilePath = o.profileOut;
    options.profileFirstStep = o.steps + 3;
    options.profileLastStep = o.steps + 5;
  }
  const TrainResult r = train(c, options);
  Row row;
  row.precision = precision;
  row.resident = resident;
  row.steps = r.lastEpochSteps;
  row.imgS = r.lastEpochImgS;
  row.stepMs = r.lastEpochSteps > 0 ? 1e3 * r.lastEpochS / static_cast<double>(r.lastEpochSteps) : 0;
  return row;
}

// --batch's sizes, each a whole number >= 1.
std::vector<int> parseBatches(const std::string& text) {
  std::vector<int> out;
  for (const std::string& item : splitList(text)) {
    const std::optional<long long> b = parseWholeInteger(item);
    BIGBATCH_REQUIRE(b && *b >= 1 && *b <= INT_MAX, InvalidArgument,
                     "bench step: --batch '{}': give whole numbers >= 1, e.g. --batch 256 or "
                     "--batch 16,64,256",
                     item);
    out.push_back(static_cast<int>(*b));
  }
  BIGBATCH_REQUIRE(!out.empty(), InvalidArgument, "bench step: --batch is empty");
  return out;
}

}  // namespace

int runBenchStep(const BenchStepOptions& o) {
  const std::vector<int> batches = parseBatches(o.batches);
  BIGBATCH_REQUIRE(o.steps >= 1 && o.size >= 8, InvalidArgument,
                   "bench step: --steps {}, --size {}: need steps >= 1, size >= 8", o.steps,
                   o.size);
  const std::filesystem::path root =
      o.runDir.empty() ? std::filesystem::temp_directory_path() /
                             fmt::format("bigbatch-bench-step-{}", ::getpid())
                       : std::filesystem::path(o.runDir);
  std::vector<bool> inputs{true};  // resident first
  if (o.input) inputs.push_back(false);
  if (!o.json) {
    fmt::print("# bigbatch bench step: {} on {}, batch {} of 3x{}x{}, {} warm-up then {} timed "
               "steps, one rank; cuda_graph {}, model.fused_bn {}\n",
               o.model, o.device, o.batches, o.size, o.size, o.steps, o.steps,
               o.cudaGraph ? "on" : "off", o.fusedBn);
    fmt::print("#{:>10} {:>9} {:>6} {:>7} {:>10} {:>10}\n", "precision", "input", "batch",
               "steps", "step_ms", "img/s");
  }
  for (const std::string& p : splitList(o.precisions)) {
    std::string curve;  // the resident rows as plan's --device-img-s
    for (const int batch : batches) {
      for (const bool resident : inputs) {
        const std::string dir =
            (root / fmt::format("{}-{}-{}", p, batch, resident ? "resident" : "input")).string();
        const Row r = measure(o, batch, p, resident, dir);
        if (resident) curve += fmt::format("{}{:.1f}@{}", curve.empty() ? "" : ",", r.imgS, batch);
        if (o.json) {
          nlohmann::json j = {{"impl", "bigbatch"},          {"model", o.model},
                              {"precision", p},              {"batch", batch},
                              {"input", resident ? "resident" : "host"},
                              {"steps", r.steps},            {"step_ms", r.stepMs},
                              {"img_s", r.imgS},             {"cuda_graph", o.cudaGraph},
                              {"fused_bn", o.fusedBn},       {"device", o.device}};
          fmt::print("{}\n", j.dump());
        } else {
          fmt::print(" {:>10} {:>9} {:>6} {:>7} {:>10.2f} {:>10.0f}\n", p,
                     resident ? "resident" : "host", batch, r.steps, r.stepMs, r.imgS);
        }
        std::fflush(stdout);
      }
    }
    if (batches.size() > 1 && !o.json) fmt::print("# {}: --device-img-s {}\n", p, curve);
  }
  if (o.runDir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }
  return 0;
}

}  // namespace bigbatch
