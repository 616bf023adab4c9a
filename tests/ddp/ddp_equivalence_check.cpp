// Data-parallel equivalence on Fashion-MNIST, run by CTest under
// `mpirun -np 2`. Same seed, same global batch of 256, BN groups of 128:
//   A: 2 ranks x 128                      (both ranks, the real exchange)
//   B: 1 rank x 256, 2 virtual workers    (rank 0 alone, after A)
//   C: 1 rank x 128 x 2 accumulation steps (rank 1 alone, beside B)
// must give the same per-step losses for 50 steps within 1e-3 relative and
// final weights within 1e-3 of the largest weight magnitude: only the fp32
// summation order differs. Negative control D (rank 0): A's recipe with the
// learning rate halved — with weight decay 0 exactly what a wrong averaging
// factor of 1/2 would do — must FAIL the same tolerance, which shows the
// check can see such a bug. Prints the deviations; exits non-zero on failure.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "bigbatch/comm/mpi_communicator.h"
#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/train/trainer.h"

using namespace bigbatch;

namespace {

struct Outcome {
  std::vector<double> losses;
  std::vector<float> weights;
};

Outcome runRecipe(Communicator& comm, int64_t batch, int64_t accumulation, int64_t groups,
                  double lr, const std::string& dir) {
  Config c = defaultTrainingConfig();
  c.set("data.train_samples=12800");  // 50 steps of 256
  c.set("data.eval_samples=500");
  c.set("train.epochs=1");
  c.set("train.stop_at_target=false");
  c.set("run.threads=1");
  c.set("optim.weight_decay=0");
  c.set("schedule.warmup_epochs=0");
  c.set("schedule.decay=constant");
  c.set(fmt::format("optim.lr={}", lr));
  c.set(fmt::format("train.batch_size={}", batch));
  c.set(fmt::format("train.accumulation_steps={}", accumulation));
  c.set(fmt::format("train.virtual_workers={}", groups));
  c.set("ddp.fusion_bytes=16384");  // several buckets, so a missed one would show
  TrainOptions o;
  o.comm = &comm;
  o.runDir = dir;
  o.overwrite = true;
  o.verbosity = Verbosity::kQuiet;
  Outcome out;
  o.onStep = [&](const StepRecord& r) { out.losses.push_back(r.loss); };
  TrainingJob job;
  torch::manual_seed(1);
  Dataset train = loadFashionMnist("", "train");
  job.trainData = takeFirst(train, 12800);
  job.testData = takeFirst(loadFashionMnist("", "test"), 500);
  ModelOptions mo;
  torch::manual_seed(1);
  job.model = buildModel(mo);
  bigbatch::train(c, o, job);
  for (const auto& p : job.model->parameters()) {
    torch::Tensor f = p.detach().contiguous().to(torch::kFloat32).reshape({-1});
    out.weights.insert(out.weights.end(), f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  }
  return out;
}

// Largest relative loss deviation and largest weight deviation / max |w|.
std::pair<double, double> deviation(const Outcome& a, const Outcome& b) {
  double loss = 0, w = 0, wmax = 0;
  if (a.losses.size() != b.losses.size() || a.weights.size() != b.weights.size()) return {1e9, 1e9};
  for (size_t i = 0; i < a.losses.size(); ++i) {
    loss = std::max(loss, std::abs(a.losses[i] - b.losses[i]) / std::abs(a.losses[i]));
  }
  for (size_t i = 0; i < a.weights.size(); ++i) {
    w = std::max(w, static_cast<double>(std::abs(a.weights[i] - b.weights[i])));
    wmax = std::max(wmax, static_cast<double>(std::abs(a.weights[i])));
  }
  return {loss, w / wmax};
}

}  // namespace

int main() {
  try {
    auto world = MpiCommunicator::world();
    BIGBATCH_CHECK(world->size() == 2, InvalidArgument, "run under mpirun -np 2");
    const int rank = world->rank();
    const std::string tmp = "/tmp/bigbatch_ddp_equivalence_" + std::to_string(getpid());
    Outcome a = runRecipe(*world, 128, 1, 1, 0.1, tmp + "_A");
    auto self = world->split(rank, 0);  // each rank alone
    Outcome other = rank == 0 ? runRecipe(*self, 256, 1, 2, 0.1, tmp + "_B")
                              : runRecipe(*self, 128, 2, 1, 0.1, tmp + "_C");
    // Rank 1 hands C to rank 0.
    uint64_t sizes[2] = {other.losses.size(), other.weights.size()};
    Outcome c;
    if (rank == 1) {
      std::filesystem::remove_all(tmp + "_C");
      world->send(sizes, sizeof sizes, 0, 1);
      world->send(other.losses.data(), sizes[0] * sizeof(double), 0, 2);
      world->send(other.weights.data(), sizes[1] * sizeof(float), 0, 3);
      return 0;
    }
    world->recv(sizes, sizeof sizes, 1, 1);
    c.losses.resize(sizes[0]);
    c.weights.resize(sizes[1]);
    world->recv(c.losses.data(), sizes[0] * sizeof(double), 1, 2);
    world->recv(c.weights.data(), sizes[1] * sizeof(float), 1, 3);
    Outcome d = runRecipe(*self, 128 * 2, 1, 2, 0.05, tmp + "_D");

    int failures = 0;
    auto report = [&](const char* what, const Outcome& x, bool mustMatch) {
      auto [l, w] = deviation(a, x);
      const bool match = x.losses.size() == 50 && l <= 1e-3 && w <= 1e-3;
      fmt::print("{}: {} steps, max loss deviation {:.3g} (relative), max weight deviation {:.3g} "
                 "(of max |w|) -> {}\n",
                 what, x.losses.size(), l, w, match ? "equivalent" : "different");
      if (match != mustMatch) ++failures;
    };
    fmt::print("A (2 ranks x 128): {} steps, first loss {:.6f}, last loss {:.6f}\n", a.losses.size(),
               a.losses.front(), a.losses.back());
    report("B (1 rank x 256, 2 BN groups)", other, true);
    report("C (1 rank x 128 x 2 accumulation steps)", c, true);
    report("D (negative control: B with half the learning rate = averaging factor 1/2)", d, false);
    for (const char* x : {"_A", "_B", "_C", "_D"}) std::filesystem::remove_all(tmp + x);
    fmt::print("{}\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
  } catch (const std::exception& e) {
    fmt::print("FAIL: {}\n", e.what());
    return 1;
  }
}
