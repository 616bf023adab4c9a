// SGD/Nesterov, LARS, LAMB, every schedule and the label-smoothing loss
// against golden values from tests/optim/golden/generate.py (python3-torch
// reference implementations written from the papers' formulas, fp32),
// including excluded parameters and zero-norm edge cases. Both the fused and
// the per-tensor optimizer paths must match.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bigbatch/optim/optimizer.h"
#include "bigbatch/schedule/batch_schedule.h"
#include "bigbatch/schedule/lr_schedule.h"
#include "bigbatch/schedule/piecewise_linear.h"

namespace bigbatch {
namespace {

using nlohmann::json;

const json& golden() {
  static const json j = [] {
    const char* root = std::getenv("BIGBATCH_SOURCE_DIR");
    const std::string path =
        std::string(root ? root : ".") + "/tests/optim/golden/optim_golden.json";
    std::ifstream in(path);
    EXPECT_TRUE(in) << "cannot read " << path;
    return json::parse(in);
  }();
  return j;
}

torch::Tensor tensorOf(const json& values, const json& shape) {
  std::vector<float> v = values.get<std::vector<float>>();
  return torch::tensor(v, torch::kFloat32).reshape(shape.get<std::vector<int64_t>>()).clone();
}

// rtol 1e-5 as the reference is fp32 too; the 1e-6 absolute floor covers
// values that cancel to near zero (weights here are O(1)).
void expectClose(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  const auto diff = (got - want).abs();
  const auto allowed = want.abs() * 1e-5 + 1e-6;
  EXPECT_TRUE(diff.le(allowed).all().item<bool>())
      << what << ": max |diff| " << diff.max().item<float>() << "\ngot  " << got << "\nwant "
      << want;
}

OptimizerOptions optionsFrom(const json& c) {
  const json& o = c["options"];
  OptimizerOptions r;
  r.name = c["optimizer"];
  r.momentum = o["momentum"];
  r.nesterov = o["nesterov"];
  r.weightDecay = o["weight_decay"];
  r.excludedLrScale = o["excluded_lr_scale"];
  r.excludedWeightDecay = o["excluded_weight_decay"];
  r.larsEta = o["lars_eta"];
  r.larsEpsilon = o["lars_epsilon"];
  r.beta1 = o["beta1"];
  r.beta2 = o["beta2"];
  r.epsilon = o["epsilon"];
  r.phiMin = o["phi_min"];
  r.phiMax = o["phi_max"];
  return r;
}

TEST(OptimGolden, EveryOptimizerCaseBothPaths) {
  ASSERT_GE(golden()["optimizers"].size(), 8u);
  for (const json& c : golden()["optimizers"]) {
    for (bool fused : {true, false}) {
      const std::string what = c["name"].get<std::string>() + (fused ? " fused" : " per-tensor");
      std::vector<NamedParameter> params;
      for (const json& p : c["params"]) {
        params.push_back({p["name"], tensorOf(p["w0"], p["shape"]).requires_grad_()});
      }
      OptimizerOptions o = optionsFrom(c);
      o.fused = fused;
      auto opt = makeOptimizer(params, o);
      for (size_t i = 0; i < params.size(); ++i) {
        ASSERT_EQ(opt->excluded(i), c["params"][i]["excluded"].get<bool>()) << params[i].name;
      }
      const json& hypers = c["hypers"];
      for (size_t s = 0; s < hypers.size(); ++s) {
        for (size_t i = 0; i < params.size(); ++i) {
          params[i].tensor.mutable_grad() =
              tensorOf(c["params"][i]["grads"][s], c["params"][i]["shape"]);
        }
        ASSERT_EQ(opt->fusedEligible(), fused) << what;
        const StepResult r =
            opt->step({hypers[s]["lr"], hypers[s]["momentum"], hypers[s]["wd_scale"]});
        ASSERT_TRUE(r.applied) << what;
      }
      for (size_t i = 0; i < params.size(); ++i) {
        expectClose(params[i].tensor.detach(),
                    tensorOf(c["params"][i]["expected"], c["params"][i]["shape"]),
                    what + " " + params[i].name);
      }
    }
  }
}

TEST(ScheduleGolden, LearningRate) {
  for (const json& c : golden()["lr_schedules"]) {
    const json& o = c["options"];
    LrScheduleOptions s;
    s.baseLr = o["base_lr"];
    s.warmupEpochs = o["warmup_epochs"];
    s.warmupStartFactor = o["warmup_start_factor"];
    s.decay = o["decay"];
    s.endLr = o["end_lr"];
    s.polyPower = o["poly_power"];
    s.stepEpochs = o["step_epochs"].get<std::vector<int64_t>>();
    s.stepGamma = o["step_gamma"];
    s.totalEpochs = o["total_epochs"];
    LrSchedule schedule(s);
    for (size_t i = 0; i < c["epochs"].size(); ++i) {
      const double want = c["expected"][i];
      EXPECT_NEAR(schedule.at(c["epochs"][i]), want, 1e-12 * std::max(1.0, std::abs(want)))
          << s.decay << " at epoch " << c["epochs"][i];
    }
  }
}

TEST(ScheduleGolden, Momentum) {
  const json& c = golden()["momentum_schedule"];
  PiecewiseLinear m(c["epochs"].get<std::vector<double>>(), c["values"].get<std::vector<double>>(),
                    c["constant"]);
  for (size_t i = 0; i < c["positions"].size(); ++i) {
    EXPECT_NEAR(m.at(c["positions"][i]), c["expected"][i].get<double>(), 1e-12)
        << "at epoch " << c["positions"][i];
  }
  PiecewiseLinear constant({}, {}, 0.9);
  EXPECT_EQ(constant.at(3.0), 0.9);
}

TEST(ScheduleGolden, BatchSizeAndLinearScaling) {
  for (const json& c : golden()["batch_schedules"]) {
    BatchSchedule b({c["epochs"].get<std::vector<int64_t>>(),
                     c["factors"].get<std::vector<int64_t>>(), c["rule"]});
    for (const json& e : c["expected"]) {
      EXPECT_EQ(b.factor(e["epoch"]), e["factor"].get<int64_t>()) << c["rule"] << " " << e;
      EXPECT_NEAR(b.lrMultiplier(e["epoch"]), e["lr_multiplier"].get<double>(), 1e-12)
          << c["rule"] << " " << e;
    }
  }
  for (const json& c : golden()["linear_scaling"]) {
    EXPECT_NEAR(linearScaledLr(c["lr_per_256"], c["batch"]), c["expected"].get<double>(), 1e-12);
  }
}

// The trainer's loss: libtorch's cross_entropy with label_smoothing, which
// must equal the (1 − α)·onehot + α/K formula.
TEST(LossGolden, LabelSmoothing) {
  const json& j = golden()["label_smoothing"];
  const int64_t k = j["classes"];
  torch::Tensor logits = tensorOf(j["logits"], json::array({-1, k}));
  torch::Tensor labels = torch::tensor(j["labels"].get<std::vector<int64_t>>(), torch::kInt64);
  for (const json& c : j["cases"]) {
    const double loss = torch::nn::functional::cross_entropy(
                            logits, labels,
                            torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(
                                c["alpha"].get<double>()))
                            .item<double>();
    const double want = c["expected"];
    EXPECT_NEAR(loss, want, 1e-5 * std::abs(want)) << "alpha " << c["alpha"];
  }
}

}  // namespace
}  // namespace bigbatch
