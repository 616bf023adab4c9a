// The tune driver against synthetic trials: the jobs it starts are exactly
// successive halving's schedule (checked against a bare AshaScheduler), each
// job's epochs and values are the trial's, every settled job is one journal
// row, a killed tune resumes without running a settled job again and ends
// with the very journal an uninterrupted tune writes (one slot and two), a
// trial whose run already ended is carried up, not re-run, failures take
// no rung, and a journal of another search is refused.
#include "bigbatch/tune/tuner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

constexpr double kMaxEpochs = 9;

// How good trial t is, spread over [0.80, 0.95) without order in t.
double quality(int trial) {
  const double x = trial * 0.6180339887;
  return 0.80 + 0.15 * (x - std::floor(x));
}

// The outcome of training trial t to `epochs` epochs: accuracy rises
// towards its quality. Time objective: the target 0.9 is reached at epoch
// ceil(2.6 / quality) (3 or 4) when the run gets that far; it stops there.
TrialOutcome synthetic(const TrialJob& job, bool timeObjective) {
  const int64_t budget =
      job.stopAfterEpoch == 0 ? static_cast<int64_t>(kMaxEpochs) : job.stopAfterEpoch;
  TrialOutcome o;
  o.ok = true;
  o.epochs = budget;
  o.complete = job.stopAfterEpoch == 0;
  if (timeObjective) {
    const auto at = static_cast<int64_t>(std::ceil(2.6 / quality(job.trial)));
    if (at <= budget) {
      o.epochs = at;
      o.reachedTarget = true;
      o.timeToTargetS = 10.0 * static_cast<double>(at);
      o.complete = true;
    }
  }
  o.accuracy = quality(job.trial) * (1 - std::exp(-static_cast<double>(o.epochs) / 2));
  o.seconds = static_cast<double>(o.epochs);
  return o;
}

struct Killed {};

// Jobs end in the order a simulated clock says (a job takes as many time
// units as it trains epochs; ties: the lower slot). Records what it started.
class FakeRunner : public TrialRunner {
 public:
  explicit FakeRunner(bool timeObjective = false, int killAtWait = -1, int failTrial = -1)
      : time_(timeObjective), killAt_(killAtWait), failTrial_(failTrial) {}

  void start(int slot, const TrialJob& job) override {
    EXPECT_FALSE(busy_.count(slot)) << "slot " << slot << " handed out twice";
    started.push_back(job);
    TrialOutcome o = synthetic(job, time_);
    if (job.trial == failTrial_ && job.rung == 0) {
      o = TrialOutcome();
      o.error = "bigbatch: error: injected";
    }
    const int64_t before = epochsDone_[job.name];
    busy_[slot] = {now_ + std::max<double>(1, static_cast<double>(o.epochs - before)), o};
    epochsDone_[job.name] = o.epochs;
  }
  std::pair<int, TrialOutcome> wait() override {
    if (waits_++ == killAt_) throw Killed{};
    auto first = busy_.begin();
    for (auto it = busy_.begin(); it != busy_.end(); ++it) {
      if (it->second.first < first->second.first) first = it;
    }
    const int slot = first->first;
    const TrialOutcome o = first->second.second;
    now_ = first->second.first;
    busy_.erase(first);
    return {slot, o};
  }

  std::vector<TrialJob> started;

 private:
  bool time_;
  int killAt_, failTrial_, waits_ = 0;
  double now_ = 0;
  std::map<int, std::pair<double, TrialOutcome>> busy_;
  std::map<std::string, int64_t> epochsDone_;
};

SearchSpace space(uint64_t seed = 7) {
  return SearchSpace({parseSearchParameter("optim.lr=1:40:log"),
                      parseSearchParameter("schedule.warmup_epochs=1,2,3")},
                     seed);
}

TuneOptions options(const std::string& name, int parallel = 1,
                    TuneObjective objective = TuneObjective::kAccuracy) {
  TuneOptions o;
  o.dir = ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid());
  fs::remove_all(o.dir);
  o.asha = {1, kMaxEpochs, 3, 9, objective == TuneObjective::kAccuracy};
  o.objective = objective;
  o.parallel = parallel;
  o.extraSeeds = 2;
  o.seed = 1;
  return o;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// results.csv's rows as (trial, rung, metric), in journal order.
struct JournalRow {
  int trial, rung;
  double metric;
};
std::vector<JournalRow> journal(const std::string& dir) {
  std::ifstream in(dir + "/results.csv");
  std::vector<JournalRow> rows;
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    for (std::string x; f.size() < 5 && std::getline(fields, x, ',');) f.push_back(x);
    rows.push_back({std::stoi(f[0]), std::stoi(f[1]), std::stod(f[4])});
  }
  return rows;
}

// The trial the journal's top rung ranks first (ties: the earlier trial).
int bestAtTheTop(const std::vector<JournalRow>& rows, int topRung, bool maximize) {
  const JournalRow* best = nullptr;
  for (const JournalRow& r : rows) {
    if (r.rung != topRung) continue;
    const bool better = !best || (maximize ? r.metric > best->metric : r.metric < best->metric) ||
                        (r.metric == best->metric && r.trial < best->trial);
    if (better) best = &r;
  }
  return best ? best->trial : -1;
}

TEST(Tuner, StartsExactlySuccessiveHalvingsJobsAndJournalsEachOnce) {
  const TuneOptions o = options("tuner_schedule");
  FakeRunner runner;
  const TuneResult r = Tuner(o, space(), runner).run();

  // The reference: a bare scheduler fed the same synthetic metrics.
  AshaScheduler asha(o.asha);
  std::vector<std::pair<int, int>> expected;
  while (auto job = asha.next()) {
    expected.emplace_back(job->trial, job->rung);
    TrialJob t;
    t.trial = job->trial;
    t.stopAfterEpoch = job->rung == asha.rungs() - 1 ? 0 : std::llround(job->epochs);
    asha.report(job->trial, job->rung, synthetic(t, false).accuracy);
  }
  ASSERT_EQ(runner.started.size(), expected.size() + 2);  // + the two seed re-runs
  int64_t epochs = 0;
  std::map<int, int64_t> reached;
  for (size_t i = 0; i < expected.size(); ++i) {
    const TrialJob& j = runner.started[i];
    EXPECT_EQ(std::make_pair(j.trial, j.rung), expected[i]) << "job " << i;
    EXPECT_EQ(j.name, fmt::format("trial-{:03d}", j.trial));
    EXPECT_EQ(j.sets, space().draw(j.trial));
    EXPECT_EQ(j.stopAfterEpoch, j.rung == 0 ? 1 : j.rung == 1 ? 3 : 0);
    const int64_t to = j.stopAfterEpoch == 0 ? 9 : j.stopAfterEpoch;
    epochs += to - reached[j.trial];
    reached[j.trial] = to;
  }
  // Every trial at rung 0; asynchronous promotions: at least 9/3 to rung 1.
  EXPECT_EQ(std::count_if(expected.begin(), expected.end(), [](auto& e) { return e.second == 0; }),
            9);
  EXPECT_GE(std::count_if(expected.begin(), expected.end(), [](auto& e) { return e.second == 1; }),
            3);
  EXPECT_EQ(r.searchEpochs, epochs);
  EXPECT_EQ(r.bestTrial, *asha.best());
  EXPECT_EQ(r.bestValues, space().draw(r.bestTrial));
  // The seed re-runs: the best trial's values, seeds 2 and 3, whole budget.
  for (int s = 0; s < 2; ++s) {
    const TrialJob& j = runner.started[expected.size() + static_cast<size_t>(s)];
    EXPECT_EQ(j.name, fmt::format("trial-{:03d}-seed{}", r.bestTrial, s + 2));
    EXPECT_EQ(j.stopAfterEpoch, 0);
    EXPECT_EQ(j.sets.back(), fmt::format("run.seed={}", s + 2));
  }
  ASSERT_EQ(r.seeds.size(), 3u);
  EXPECT_EQ(r.seedValues, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(r.seedEpochs, 18);
  // One journal row per job, in the order they settled, plus the header.
  std::ifstream in(o.dir + "/results.csv");
  std::vector<std::string> rows;
  for (std::string l; std::getline(in, l);) rows.push_back(l);
  ASSERT_EQ(rows.size(), expected.size() + 1);
  EXPECT_EQ(rows[1].rfind(fmt::format("{},{},1,ok,", expected[0].first, expected[0].second), 0), 0u)
      << rows[1];
  fs::remove_all(o.dir);
}

// Kills the tune at its `killAt`-th wait, resumes it, and compares with an
// uninterrupted tune: no settled job starts again, the jobs in flight at the
// kill start first, and the journal goes on from the rows before the kill.
// With one slot the result is the uninterrupted tune's journal byte for
// byte; with more, the restarted jobs may end in another order than they
// would have (a real clock), so the rest of the search may differ.
void killAndResume(int parallel, int killAt, TuneObjective objective) {
  const std::string tag = fmt::format("p{}_k{}_{}", parallel, killAt, static_cast<int>(objective));
  const TuneOptions whole = options("tuner_whole_" + tag, parallel, objective);
  FakeRunner wholeRunner(objective == TuneObjective::kTime);
  const TuneResult expected = Tuner(whole, space(), wholeRunner).run();

  const TuneOptions cut = options("tuner_cut_" + tag, parallel, objective);
  FakeRunner first(objective == TuneObjective::kTime, killAt);
  EXPECT_THROW(Tuner(cut, space(), first).run(), Killed);
  std::ifstream in(cut.dir + "/results.csv");
  std::set<std::pair<int, int>> settled;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    settled.emplace(std::stoi(line), std::stoi(line.substr(line.find(',') + 1)));
  }
  ASSERT_EQ(settled.size(), static_cast<size_t>(killAt));
  const std::string settledText = readFile(cut.dir + "/results.csv");

  TuneOptions again = cut;
  again.resume = true;
  FakeRunner second(objective == TuneObjective::kTime);
  const TuneResult resumed = Tuner(again, space(), second).run();
  for (const TrialJob& j : second.started) {
    EXPECT_FALSE(j.rung >= 0 && settled.count({j.trial, j.rung}))
        << "trial " << j.trial << " rung " << j.rung << " settled before the kill, run again";
  }
  // The jobs in flight at the kill start again: every job is started by one
  // of the two runners, and the first had `parallel` of them unsettled.
  std::set<std::pair<int, int>> inFlight;
  for (const TrialJob& j : first.started) {
    if (!settled.count({j.trial, j.rung})) inFlight.emplace(j.trial, j.rung);
  }
  ASSERT_EQ(inFlight.size(), static_cast<size_t>(parallel));
  ASSERT_GE(second.started.size(), inFlight.size());
  for (size_t i = 0; i < inFlight.size(); ++i) {
    EXPECT_TRUE(inFlight.count({second.started[i].trial, second.started[i].rung}));
  }
  const std::string before = readFile(cut.dir + "/results.csv");
  if (parallel == 1) {
    EXPECT_EQ(first.started.size() + second.started.size(), wholeRunner.started.size() + 1);
    EXPECT_EQ(before, readFile(whole.dir + "/results.csv"));
    EXPECT_EQ(readFile(cut.dir + "/seeds.csv"), readFile(whole.dir + "/seeds.csv"));
    EXPECT_EQ(resumed.bestTrial, expected.bestTrial);
    EXPECT_EQ(resumed.searchEpochs, expected.searchEpochs);
  } else {
    // The restarted jobs may end in another order than they would have, so
    // the rest of the search may differ; what must hold: the rows settled
    // before the kill stay as they were, every job is journaled once, every
    // trial ran its first rung, and the result is the journal's best.
    EXPECT_EQ(before.substr(0, settledText.size()), settledText);
    const std::vector<JournalRow> rows = journal(cut.dir);
    std::set<std::pair<int, int>> seen;
    std::set<int> atFirstRung;
    for (const JournalRow& r : rows) {
      EXPECT_TRUE(seen.emplace(r.trial, r.rung).second)
          << "trial " << r.trial << " rung " << r.rung << " journaled twice";
      if (r.rung == 0) atFirstRung.insert(r.trial);
    }
    EXPECT_EQ(atFirstRung.size(), 9u);
    EXPECT_EQ(resumed.bestTrial, bestAtTheTop(rows, 2, objective == TuneObjective::kAccuracy));
  }
  fs::remove_all(whole.dir);
  fs::remove_all(cut.dir);
}

TEST(Tuner, AKilledTuneResumesWithoutRedoingASettledJob) {
  killAndResume(1, 5, TuneObjective::kAccuracy);
}

TEST(Tuner, AKilledTuneWithTwoSlotsKeepsItsJournalAndSettlesEveryJobOnce) {
  killAndResume(2, 4, TuneObjective::kAccuracy);
  killAndResume(2, 9, TuneObjective::kTime);
}

TEST(Tuner, TimeObjectiveCarriesATrialWhoseRunEndedAtTheTarget) {
  const TuneOptions o = options("tuner_time", 1, TuneObjective::kTime);
  FakeRunner runner(true);
  const TuneResult r = Tuner(o, space(), runner).run();
  std::ifstream in(o.dir + "/results.csv");
  std::string line;
  std::getline(in, line);
  int carried = 0;
  std::set<std::pair<int, int>> run;
  for (const TrialJob& j : runner.started) run.emplace(j.trial, j.rung);
  while (std::getline(in, line)) {
    const int trial = std::stoi(line), rung = std::stoi(line.substr(line.find(',') + 1));
    if (line.find(",carried,") != std::string::npos) {
      ++carried;
      EXPECT_FALSE(run.count({trial, rung})) << "a carried job was run: " << line;
      EXPECT_NE(line.find(",0.000,"), std::string::npos) << "carried jobs take no time: " << line;
    }
  }
  EXPECT_GT(carried, 0);
  // Time: smaller is better; the best reached the target soonest of the
  // top rung (ties: the earlier trial), and its time is that trial's own.
  ASSERT_TRUE(r.seeds[0].reachedTarget);
  const std::vector<JournalRow> rows = journal(o.dir);
  EXPECT_EQ(r.bestTrial, bestAtTheTop(rows, 2, /*maximize=*/false));
  TrialJob bestJob;
  bestJob.trial = r.bestTrial;
  EXPECT_DOUBLE_EQ(r.seeds[0].timeToTargetS, synthetic(bestJob, true).timeToTargetS);
  EXPECT_EQ(tuneMetric(TuneObjective::kTime, r.seeds[0]), r.seeds[0].timeToTargetS);
  TrialOutcome missed;
  missed.accuracy = 0.85;
  EXPECT_GT(tuneMetric(TuneObjective::kTime, missed), 1e6);  // after any reached one
  fs::remove_all(o.dir);
}

TEST(Tuner, AFailedJobTakesNoRungAndIsJournaled) {
  const TuneOptions o = options("tuner_fail");
  FakeRunner runner(false, -1, /*failTrial*/ 0);
  const TuneResult r = Tuner(o, space(), runner).run();
  EXPECT_EQ(r.failed, 1);
  EXPECT_NE(r.bestTrial, 0);
  for (const TrialJob& j : runner.started) EXPECT_FALSE(j.trial == 0 && j.rung > 0);
  EXPECT_NE(readFile(o.dir + "/results.csv").find("0,0,0,failed,"), std::string::npos);
  EXPECT_NE(readFile(o.dir + "/results.csv").find("bigbatch: error: injected"), std::string::npos);
  fs::remove_all(o.dir);
}

TEST(Tuner, TrialZeroCanBeTheRecipesOwnValues) {
  TuneOptions o = options("tuner_recipe");
  o.firstValues = {"optim.lr=50", "schedule.warmup_epochs=2"};
  FakeRunner runner;
  Tuner(o, space(), runner).run();
  for (const TrialJob& j : runner.started) {
    if (j.trial == 0 && j.rung >= 0) {
      EXPECT_EQ(j.sets, o.firstValues);
    }
    if (j.trial != 0) {
      EXPECT_EQ(j.sets.front(), space().draw(j.trial).front());
    }
  }
  EXPECT_NE(readFile(o.dir + "/results.csv").find("\"optim.lr=50 schedule.warmup_epochs=2\""),
            std::string::npos);
  fs::remove_all(o.dir);
}

TEST(Tuner, RefusesToOverwriteOrResumeAnotherSearch) {
  const TuneOptions o = options("tuner_other");
  FakeRunner runner;
  Tuner(o, space(), runner).run();
  FakeRunner again;
  try {
    Tuner(o, space(), again).run();  // no --resume: refused
    ADD_FAILURE() << "a second tune into the same directory was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("--resume"), std::string::npos) << e.what();
  }
  TuneOptions resume = o;
  resume.resume = true;
  FakeRunner other;
  try {
    Tuner(resume, space(/*seed*/ 8), other).run();  // other values drawn
    ADD_FAILURE() << "a journal of another search was resumed";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("another"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(other.started.empty());
  fs::remove_all(o.dir);
}

}  // namespace
}  // namespace bigbatch
