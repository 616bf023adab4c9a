// Asynchronous successive halving (ASHA; Li et al., "A System for Massively
// Parallel Hyperparameter Tuning", MLSys 2020), the scheduler of
// `bigbatch tune`: which trial to run next, and for how long.
//
// Rungs k = 0..K train a trial to r_k = minEpochs·η^k epochs, k < K =
// floor(log_η(maxEpochs / minEpochs)), and the top rung to maxEpochs (as in
// Hyperband: every rung at least η times the one below). Whenever a worker is free, next() looks
// from the highest rung below the top down for a trial that finished rung k, is among the best
// floor(n_k / η) of the n_k trials that finished rung k so far, and was not promoted yet — and
// promotes it to rung k+1; if none, it starts a new trial at rung 0 while the trial budget lasts.
// Promotions never wait for a rung to fill (the "asynchronous"), so a worker is never idle while
// work exists; a trial outside the top 1/η is simply never continued (stopped
// early). With one worker and reports in order this is exactly successive
// halving's schedule with the decisions made as early as the data allows.
//
// Metrics: larger is better (accuracy), or smaller (a loss or time to
// target) with `maximize = false`. Ties go to the earlier trial, so the
// schedule is a pure function of the reports. A trial that failed reports
// nothing (fail()): it takes no place in any rung.
//
// Threading: not thread-safe; one owner thread (the tune driver) calls all.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace bigbatch {

struct AshaOptions {
  double minEpochs = 1;  // r_0
  double maxEpochs = 9;  // the top rung's epochs
  int eta = 3;           // keep the best 1/eta of each rung
  int maxTrials = 27;    // trials started at rung 0 in all
  bool maximize = true;  // metric: larger is better
};

class AshaScheduler {
 public:
  explicit AshaScheduler(AshaOptions options);

  struct Job {
    int trial;      // 0, 1, ... in the order trials were started
    int rung;       // 0 .. rungs() - 1
    double epochs;  // train the trial to this many epochs in all
  };
  // The next job for a free worker, or nullopt when nothing can start now
  // (every started trial is running or stopped and the budget is spent —
  // finished() says whether anything is still running).
  std::optional<Job> next();
  // The result of a job next() handed out.
  void report(int trial, int rung, double metric);
  // A job that failed: its trial stops and holds no place in any rung.
  void fail(int trial, int rung);

  int rungs() const { return static_cast<int>(epochs_.size()); }
  double epochsAt(int rung) const { return epochs_[rung]; }
  int trialsStarted() const { return started_; }
  // No job handed out is still unreported, and next() has nothing to give.
  bool finished() const;
  // The metric of `trial` at `rung`, if reported.
  std::optional<double> metric(int trial, int rung) const;
  // The best trial at the highest rung any trial reached (ties: earlier).
  std::optional<int> best() const;

 private:
  bool better(double a, double b) const { return options_.maximize ? a > b : a < b; }

  AshaOptions options_;
  std::vector<double> epochs_;  // per rung
  struct Entry {
    int trial;
    double metric;
    bool promoted = false;
  };
  std::vector<std::vector<Entry>> done_;      // per rung, in report order
  std::vector<std::pair<int, int>> running_;  // (trial, rung) handed out, not reported
  int started_ = 0;
};

}  // namespace bigbatch
