// Partitioned optimizer state (ddp.partition = optimizer) against the
// unpartitioned exchange on real Fashion-MNIST, run by CTest under
// `mpirun -np 2` and `-np 3`. Each case trains 25 steps of a global batch of
// 128 (126 on 3 ranks) twice from the same seed — allreduce + whole
// optimizer, then reduce-scatter + 1/N of the optimizer + all-gather — and
// compares every step's loss and the final weights:
//   * SGD: bit-identical. Under comm.allreduce = ring (set below) the
//     gradient sums are the same additions in the same order, and SGD has
//     no norms: nothing else differs.
//   * LARS and LAMB within 1e-4 relative loss and 1e-4 of max |w|: their
//     per-layer norms are summed from each rank's slices — other partial
//     sums in another order, a relative difference of ~1e-7 per norm at
//     most, which 25 steps may grow to ~1e-6 (on this model they came out
//     bit-identical). A real error (a slice updated twice or not at all, one
//     rank's norm instead of the layer's) moves weights by ~1e-2 — the
//     negative control shows this check sees that.
// Cases: SGD, LARS, LAMB; on 2 ranks also LAMB with fp16 gradients on the
// wire (dynamic loss scaling), 2 accumulation steps, 2 BatchNorm groups and
// a NaN injected at step 5 (skipped by every rank alike).
// Resume (2 ranks): a partitioned run's mid-epoch checkpoint holds the same
// whole optimizer state as the unpartitioned run's, resumes bit-exactly to
// the uninterrupted run's weights, and resumes on 1 rank unpartitioned to
// the 1-rank resume of the unpartitioned checkpoint (re-partitioning).
// Prints the deviations; exits non-zero on failure.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "bigbatch/ckpt/checkpoint.h"
#include "bigbatch/collectives/collectives.h"
#include "bigbatch/comm/mpi_communicator.h"
#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/train/trainer.h"

using namespace bigbatch;

namespace {

constexpr int64_t kSteps = 25;       // optimizer steps per run (one epoch)
constexpr int64_t kResumeStep = 10;  // the mid-epoch checkpoint the resume checks start from

struct Outcome {
  std::vector<double> losses;
  std::vector<float> weights;
};

Outcome run(Communicator& comm, const std::vector<std::string>& sets, const std::string& dir,
            const std::string& resume = "") {
  const int64_t perRank = 128 / comm.size();
  Config c = defaultTrainingConfig();
  c.set(fmt::format("data.train_samples={}", kSteps * perRank * comm.size()));
  c.set("data.eval_samples=500");
  c.set("train.epochs=1");
  c.set("train.stop_at_target=false");
  c.set("run.threads=1");
  c.set("schedule.warmup_epochs=0.2");
  c.set(fmt::format("train.batch_size={}", perRank));
  c.set("ddp.fusion_bytes=16384");  // several buckets, a layer split across ranks in each
  c.set("ckpt.every_steps=0");
  // The ring allreduce is a reduce-scatter (the one the partitioned exchange
  // runs) and an all-gather: the same additions in the same order. The
  // tuned default may pick another algorithm by timing, and on 3 ranks
  // every algorithm adds in its own order — two unpartitioned runs under
  // auto then differ by ~1e-2 of max |w| after 50 steps.
  c.set("comm.allreduce=ring");
  for (const auto& s : sets) c.set(s);
  TrainOptions o;
  o.comm = &comm;
  o.runDir = dir;
  o.overwrite = true;
  o.resume = resume;
  o.verbosity = Verbosity::kQuiet;
  Outcome out;
  o.onStep = [&](const StepRecord& r) { out.losses.push_back(r.loss); };
  TrainingJob job;
  static const Dataset train = loadFashionMnist("", "train");  // once per process
  static const Dataset test = takeFirst(loadFashionMnist("", "test"), 500);
  job.trainData = takeFirst(train, c.getInt("data.train_samples"));
  job.testData = test;
  ModelOptions mo;
  torch::manual_seed(1);
  job.model = buildModel(mo);
  bigbatch::train(c, o, job);
  for (const auto& p : job.model->parameters()) {
    torch::Tensor f = p.detach().contiguous().reshape({-1});
    out.weights.insert(out.weights.end(), f.data_ptr<float>(), f.data_ptr<float>() + f.numel());
  }
  return out;
}

struct Deviation {
  bool sameShape = false;
  bool identical = false;
  double loss = 0;    // max relative
  double weight = 0;  // max |Δw| / max |w|
};

Deviation compare(const Outcome& a, const Outcome& b) {
  Deviation d;
  d.sameShape = a.losses.size() == b.losses.size() && a.weights.size() == b.weights.size();
  if (!d.sameShape) return d;
  d.identical = true;
  for (size_t i = 0; i < a.losses.size(); ++i) {
    const bool bothNan = std::isnan(a.losses[i]) && std::isnan(b.losses[i]);
    if (!bothNan && a.losses[i] != b.losses[i]) d.identical = false;
    if (!bothNan) {
      d.loss = std::max(d.loss, std::abs(a.losses[i] - b.losses[i]) / std::abs(a.losses[i]));
    }
    if (std::isnan(a.losses[i]) != std::isnan(b.losses[i])) d.loss = 1e9;
  }
  double wmax = 0;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    if (a.weights[i] != b.weights[i]) d.identical = false;
    d.weight = std::max(d.weight, static_cast<double>(std::abs(a.weights[i] - b.weights[i])));
    wmax = std::max(wmax, static_cast<double>(std::abs(a.weights[i])));
  }
  d.weight /= wmax;
  return d;
}

constexpr double kTolerance = 1e-4;

// The optimizer state of a checkpoint file, whole tensors by name.
std::map<std::string, torch::Tensor> optimizerState(const std::string& file) {
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, t] : readCheckpoint(file).optimizer) out.emplace(name, t);
  return out;
}

// The checks, as named steps; each counts its failures and prints on rank 0.
class PartitionChecks {
 public:
  PartitionChecks(Communicator& world, std::string tmp)
      : world_(world), n_(world.size()), rank_(world.rank()), tmp_(std::move(tmp)) {}

  int failures() const { return failures_; }

  // SGD, LARS, LAMB (and on 2 ranks LAMB with fp16 wire, accumulation, BN
  // groups and a skipped NaN) partitioned vs not; returns the partitioned
  // LARS run for the negative control.
  Outcome partitionedMatchesUnpartitioned() {
    struct Case {
      std::string name;
      std::vector<std::string> sets;
      bool exact;
    };
    std::vector<Case> cases = {
        {"sgd", {"optim.name=sgd", "optim.lr=0.1"}, true},
        {"lars", kLars, false},
        {"lamb", {"optim.name=lamb", "optim.lr=0.004", "optim.weight_decay=0.01"}, false},
    };
    if (n_ == 2) {
      cases.push_back(
          {"lamb, fp16 wire + loss scaling, 2 accumulation steps, 2 BN groups, NaN "
           "at step 5 skipped",
           {"optim.name=lamb", "optim.lr=0.004", "ddp.exchange_dtype=fp16", "train.batch_size=32",
            "train.accumulation_steps=2", "train.virtual_workers=2", "fault.kind=nan",
            "fault.step=5", "fault.rank=1", "train.nonfinite=skip"},
           false});
    }
    Outcome lars;
    for (const Case& k : cases) {
      const Outcome a = run(world_, k.sets, tmp_ + "_a");
      const Outcome p = run(world_, partitioned(k.sets), tmp_ + "_p");
      check(fmt::format("{} on {} ranks, partitioned vs not", k.name, n_), a, p, k.exact);
      if (k.name == "lars") lars = p;
    }
    return lars;
  }

  // LARS with eta x 0.9 — the kind of error one rank's partial |w| and |g|
  // would make in the trust ratio — must FAIL the tolerance.
  void negativeControl(const Outcome& lars) {
    std::vector<std::string> wrong = partitioned(kLars);
    wrong.push_back("optim.lars_eta=0.0009");
    check("negative control: LARS with eta 0.9x", lars, run(world_, wrong, tmp_ + "_w"),
          /*exact=*/false, /*mustMatch=*/false);
  }

  // 2 ranks: checkpoints every kResumeStep steps; from the first of them.
  void resume() {
    std::vector<std::string> sets = kLars;
    sets.insert(sets.end(), {fmt::format("ckpt.every_steps={}", kResumeStep), "ckpt.keep=5"});
    const Outcome whole = run(world_, partitioned(sets), tmp_ + "_r");
    run(world_, sets, tmp_ + "_u");
    const std::string mid = fmt::format("{}_r/checkpoints/ckpt-{:09d}.pt", tmp_, kResumeStep);
    const std::string midUnpartitioned =
        fmt::format("{}_u/checkpoints/ckpt-{:09d}.pt", tmp_, kResumeStep);
    resumeIsBitExact(whole, run(world_, partitioned(sets), tmp_ + "_r2", mid));
    if (rank_ == 0) {
      checkpointHoldsTheUnpartitionedState(mid, midUnpartitioned);
      auto self = world_.split(0, 0);
      resumesOnAnotherWorldSize(*self, mid, midUnpartitioned);
    } else {
      world_.split(1, 0);
    }
  }

  void removeRunDirectories() {
    world_.barrier();
    if (rank_ != 0) return;
    for (const char* x : {"_a", "_p", "_w", "_r", "_u", "_r2", "_x", "_y"}) {
      std::filesystem::remove_all(tmp_ + x);
    }
  }

 private:
  inline static const std::vector<std::string> kLars = {"optim.name=lars", "optim.lr=2",
                                                        "optim.excluded_lr_scale=0.01"};

  static std::vector<std::string> partitioned(std::vector<std::string> sets) {
    sets.push_back("ddp.partition=optimizer");
    return sets;
  }

  void say(const std::string& line) const {
    if (rank_ == 0) fmt::print("{}\n", line);
  }

  void check(const std::string& what, const Outcome& a, const Outcome& b, bool exact,
             bool mustMatch = true) {
    const Deviation d = compare(a, b);
    const bool match = d.sameShape && static_cast<int64_t>(a.losses.size()) == kSteps &&
                       (exact ? d.identical : d.loss <= kTolerance && d.weight <= kTolerance);
    say(fmt::format("{}: {} steps, loss deviation {:.3g}, weight deviation {:.3g}{} -> {}", what,
                    b.losses.size(), d.loss, d.weight, d.identical ? " (bit-identical)" : "",
                    match ? "equivalent" : "DIFFERENT"));
    if (match != mustMatch) ++failures_;
  }

  // The resumed run reports only its own steps after kResumeStep: those,
  // and the weights.
  void resumeIsBitExact(const Outcome& whole, const Outcome& resumed) {
    Outcome tail = whole;
    tail.losses.assign(whole.losses.end() - (kSteps - kResumeStep), whole.losses.end());
    const Deviation d = compare(tail, resumed);
    say(fmt::format("partitioned resume from step {} on 2 ranks: {} steps, {}", kResumeStep,
                    resumed.losses.size(),
                    d.identical ? "bit-identical to the uninterrupted run" : "DIFFERENT"));
    if (!d.identical) ++failures_;
  }

  void checkpointHoldsTheUnpartitionedState(const std::string& mine, const std::string& theirs) {
    const auto a = optimizerState(mine), b = optimizerState(theirs);
    double worst = a.size() == b.size() ? 0 : 1e9;
    for (const auto& [name, t] : a) {
      if (!b.count(name) || b.at(name).sizes() != t.sizes()) {
        worst = 1e9;
        continue;
      }
      const double scale = std::max(b.at(name).abs().max().item<double>(), 1e-30);
      worst = std::max(worst, (t - b.at(name)).abs().max().item<double>() / scale);
    }
    const bool ok = worst <= kTolerance && a.size() > 1;
    say(
        fmt::format("checkpoint at step {}: {} optimizer tensors, whole shapes, max deviation "
                    "from the unpartitioned run's {:.3g} -> {}",
                    kResumeStep, a.size(), worst, ok ? "same state" : "DIFFERENT"));
    if (!ok) ++failures_;
  }

  // Re-partitioning: on 1 rank the partitioned checkpoint resumes to what
  // the unpartitioned one resumes to.
  void resumesOnAnotherWorldSize(Communicator& self, const std::string& mine,
                                 const std::string& theirs) {
    const Outcome x = run(self, kLars, tmp_ + "_x", mine);
    const Outcome y = run(self, kLars, tmp_ + "_y", theirs);
    const Deviation d = compare(x, y);
    const bool same =
        d.sameShape && d.loss <= kTolerance && d.weight <= kTolerance && !x.losses.empty();
    say(
        fmt::format("resume on 1 rank from the partitioned vs the unpartitioned checkpoint: {} "
                    "steps, loss deviation {:.3g}, weight deviation {:.3g} -> {}",
                    x.losses.size(), d.loss, d.weight, same ? "equivalent" : "DIFFERENT"));
    if (!same) ++failures_;
  }

  Communicator& world_;
  const int n_, rank_;
  const std::string tmp_;
  int failures_ = 0;
};

}  // namespace

int main() {
  try {
    auto world = MpiCommunicator::world();
    const int n = world->size();
    BIGBATCH_CHECK(n == 2 || n == 3, InvalidArgument, "run under mpirun -np 2 or -np 3");
    int64_t pid = getpid();  // rank 0's: every rank names the same run directories
    broadcast(*world, &pid, sizeof pid, 0);
    PartitionChecks checks(*world, fmt::format("/tmp/bigbatch_partition_{}_{}", n, pid));
    checks.negativeControl(checks.partitionedMatchesUnpartitioned());
    if (n == 2) checks.resume();
    checks.removeRunDirectories();
    // Rank 0 decides: the checks printed there.
    int verdict = checks.failures();
    broadcast(*world, &verdict, sizeof verdict, 0);
    if (world->rank() == 0) fmt::print("{}\n", verdict ? "FAIL" : "PASS");
    return verdict ? 1 : 0;
  } catch (const std::exception& e) {
    fmt::print("FAIL: {}\n", e.what());
    return 1;
  }
}
