// The driver of `bigbatch tune`: asynchronous successive halving (asha.h)
// over a search space (search_space.h), where every job is an ordinary
// training run that a TrialRunner starts, a journal that lets a killed tune
// continue without redoing finished work, and the best trial re-run with
// more seeds before it is called best.
//
// A trial is one point of the space. Its jobs train it rung by rung: the job
// of rung k runs `bigbatch train` to epoch r_k with train.stop_after_epoch
// (the schedules span the recipe's whole budget, so a trial trained on
// through every rung is exactly the run the recipe describes), and the next
// rung's job resumes that run from its checkpoint. Metric of a job:
//   accuracy  the test accuracy at its last epoch (larger is better)
//   time      seconds to the target accuracy, run_start to the evaluation
//             that reached it, summed over the trial's jobs (smaller is
//             better); a job that has not reached it ranks after every one
//             that has, by accuracy: 1e6 × (2 − accuracy).
// A trial whose run already ended (its budget done, or the target reached
// under train.stop_at_target) is promoted without running again: its
// outcome is carried to the next rung.
//
// Journal, in the tune directory: results.csv gets one row per settled job,
// in the order they settled; seeds.csv one per seed re-run. On --resume the
// scheduler is replayed against the journal — it is a pure function of the
// reports and the driver fills its free slots the same way each time — and
// the jobs that were still running when the tune was killed start again,
// from their trial's newest checkpoint (the runner's business).
//
// Threading: one owner thread calls everything; the runner's jobs run
// concurrently in up to `parallel` slots.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/tune/asha.h"
#include "bigbatch/tune/search_space.h"

namespace bigbatch {

enum class TuneObjective { kAccuracy, kTime };

struct TuneOptions {
  std::string dir;  // the tune directory: journal and trial runs
  AshaOptions asha;
  TuneObjective objective = TuneObjective::kAccuracy;
  int parallel = 1;    // jobs at once
  int extraSeeds = 2;  // re-runs of the best trial, with seeds seed+1, seed+2, ...
  int64_t seed = 1;    // the recipe's run.seed (the trials' own)
  // Epochs the search may train in all (seed re-runs excluded); 0: no cap.
  // A job whose epochs (at most: a trial that stops at the target takes
  // fewer) would pass it is not started, and the search ends when the
  // scheduler's next job does not fit — ASHA promotes whenever a rung
  // allows, so --trials alone does not bound the epochs.
  int64_t budgetEpochs = 0;
  // Trial 0's values instead of a draw (key=value for every parameter):
  // the recipe's own, so the search competes with the recipe it refines.
  std::vector<std::string> firstValues;
  bool resume = false;  // continue the journal in `dir`
};

// One training run to start.
struct TrialJob {
  std::string name;  // its run directory's name: trial-003, trial-003-seed2
  int trial = 0;
  int rung = 0;                   // -1: a seed re-run of the best trial
  int64_t stopAfterEpoch = 0;     // train.stop_after_epoch; 0: the whole budget
  std::vector<std::string> sets;  // key=value: the trial's values (and run.seed)
};

// What a job's run reported (its summary.json), or why it failed.
struct TrialOutcome {
  bool ok = false;
  std::string error;    // when !ok
  double accuracy = 0;  // test accuracy at the run's last evaluation
  bool reachedTarget = false;
  double timeToTargetS = 0;  // when reached: run_start to that evaluation, over all jobs
  int64_t epochs = 0;        // epochs the trial's run has done in all
  bool complete = false;     // the run ended (not paused at a rung)
  double seconds = 0;        // wall seconds of this job (0: carried, not run)
};

// Starts jobs and reports their ends. Implementations: ProcessTrialRunner
// (bigbatch train subprocesses); the tests' synthetic curves.
class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  // Starts `job` in slot `slot` (0 .. parallel - 1, free) and returns.
  virtual void start(int slot, const TrialJob& job) = 0;
  // Blocks until a started job ends: its slot and outcome.
  virtual std::pair<int, TrialOutcome> wait() = 0;
};

struct TuneResult {
  int bestTrial = -1;
  std::vector<std::string> bestValues;  // key=value
  // The best trial's outcome at the top rung, then its seed re-runs'.
  std::vector<TrialOutcome> seeds;
  std::vector<int64_t> seedValues;  // run.seed of each entry of `seeds`
  int64_t searchEpochs = 0;         // epochs the search's jobs trained, seed re-runs excluded
  int64_t seedEpochs = 0;           // epochs of the seed re-runs
  int jobs = 0, failed = 0;
};

// The metric ASHA ranks by (see the top of this file).
double tuneMetric(TuneObjective objective, const TrialOutcome& outcome);

class Tuner {
 public:
  Tuner(TuneOptions options, SearchSpace space, TrialRunner& runner);
  // The whole search and the seed re-runs; writes results.csv and seeds.csv
  // as jobs settle. Throws InvalidArgument when --resume meets a journal
  // this search did not write (another space or schedule).
  TuneResult run();

 private:
  struct Handed {
    AshaScheduler::Job job;
    bool started = false;
    int64_t cost = 0;  // the epochs it may add (0: carried)
  };
  void fill();
  std::pair<int, TrialOutcome> nextOutcome();
  void settle(int slot, const TrialOutcome& outcome);
  TrialJob makeJob(const AshaScheduler::Job& job) const;
  int64_t newEpochs(const AshaScheduler::Job& job) const;
  std::vector<std::string> valuesOf(int trial) const;
  void runSeeds(TuneResult& result);

  TuneOptions options_;
  SearchSpace space_;
  TrialRunner& runner_;
  AshaScheduler asha_;
  std::vector<std::optional<Handed>> slots_;
  std::vector<std::vector<std::string>> journal_;  // results.csv rows to replay
  size_t replayed_ = 0;
  int64_t committed_ = 0;  // epochs of the jobs handed out and not settled
  bool budgetSpent_ = false;
  std::vector<std::optional<TrialOutcome>> last_;  // per trial: its latest outcome
  TuneResult result_;
};

}  // namespace bigbatch
