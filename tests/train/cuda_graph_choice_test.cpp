// run.cuda_graph refused before anything starts where a step cannot be
// captured (validateTrainingConfig, which the launcher and train() call
// first): each reason named with its key and the fix — K-FAC's taps,
// virtual workers, a TorchScript module, accumulation, more than one rank,
// a codec, the per-tensor optimizer, train.nonfinite = skip, a batch-size
// schedule, and the CPU device. Off (the default) is never refused; on with
// nothing in the way it passes the graph's own checks (the CPU build then
// refuses run.device = "cuda" itself, naming the CUDA build). Every build.
#include <gtest/gtest.h>

#include <algorithm>

#include "bigbatch/common/config.h"
#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"
#include "config_refusal.h"

namespace bigbatch {
namespace {

// A recipe the graph can capture but for `sets` (key=value, ';' between).
Config graphRun(const std::string& sets = "") {
  Config c = defaultTrainingConfig();
  c.set("run.cuda_graph=true");
  c.set("run.device=cuda");
  size_t from = 0;
  while (from < sets.size()) {
    const size_t to = std::min(sets.find(';', from), sets.size());
    c.set(sets.substr(from, to - from));
    from = to + 1;
  }
  return c;
}

using test_config::refusal;

void expectGraphRefusal(const std::string& set, const char* reason) {
  const std::string what = refusal(graphRun(set));
  ASSERT_FALSE(what.empty()) << set << ": not refused";
  for (const char* needle : {"run.cuda_graph", reason, "run.cuda_graph = false"}) {
    EXPECT_NE(what.find(needle), std::string::npos)
        << set << ": '" << what << "' lacks '" << needle << "'";
  }
}

TEST(CudaGraphChoice, OffByDefaultAndNeverRefusedOff) {
  EXPECT_FALSE(defaultTrainingConfig().getBool("run.cuda_graph"));
  Config c = defaultTrainingConfig();
  c.set("optim.kfac=true");
  c.set("train.virtual_workers=2");
  EXPECT_EQ(refusal(c), "");
}

TEST(CudaGraphChoice, EachReasonAStepCannotBeCapturedIsNamed) {
  expectGraphRefusal("optim.kfac=true", "optim.kfac");
  expectGraphRefusal("train.virtual_workers=4", "train.virtual_workers");
  expectGraphRefusal("train.accumulation_steps=2", "train.accumulation_steps");
  expectGraphRefusal("run.workers=2", "run.workers");
  expectGraphRefusal("ddp.compression=powersgd", "ddp.compression");
  expectGraphRefusal("optim.fused=false", "optim.fused");
  expectGraphRefusal("train.nonfinite=skip", "train.nonfinite");
  expectGraphRefusal("schedule.batch_epochs=[2];schedule.batch_factors=[2]", "schedule.batch_epochs");
  expectGraphRefusal("run.device=cpu", "run.device");
}

TEST(CudaGraphChoice, ATorchScriptModuleIsRefused) {
  Config c = graphRun("model.name=torchscript");
  c.set("model.path=/nonexistent/model.pt");  // not opened by validateTrainingConfig
  const std::string what = refusal(c);
  EXPECT_NE(what.find("torchscript"), std::string::npos) << what;
  EXPECT_NE(what.find("run.cuda_graph = false"), std::string::npos) << what;
}

TEST(CudaGraphChoice, NothingInTheWayPassesTheGraphsChecks) {
  const std::string what = refusal(graphRun());
  // The CUDA build on a GPU accepts it; elsewhere run.device = "cuda" is
  // what is refused, not the graph.
  EXPECT_EQ(what.find("cannot capture"), std::string::npos) << what;
}

}  // namespace
}  // namespace bigbatch
