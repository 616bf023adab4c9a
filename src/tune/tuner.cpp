#include "bigbatch/tune/tuner.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

const char* kResultsHeader =
    "trial,rung,epochs,status,metric,accuracy,reached_target,time_to_target_s,complete,"
    "job_seconds,values,error";
const char* kSeedsHeader =
    "seed,status,accuracy,reached_target,time_to_target_s,epochs,job_seconds,error";

// A CSV field: quoted (quotes doubled) when it holds a separator or quote.
std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n ") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

std::vector<std::string> parseCsvLine(const std::string& line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  return fields;
}

// The data rows of a journal file (none when it does not exist); refuses a
// file whose header is not `header` or whose rows have another width.
std::vector<std::vector<std::string>> readJournal(const fs::path& path, const std::string& header) {
  std::vector<std::vector<std::string>> rows;
  std::ifstream in(path);
  if (!in) return rows;
  std::string line;
  std::getline(in, line);
  BIGBATCH_REQUIRE(line == header, InvalidArgument,
                   "'{}' is not a bigbatch tune journal of this version (header '{}'); continue "
                   "it with the version that wrote it, or start a new --dir",
                   path.string(), line);
  const size_t width = parseCsvLine(header).size();
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    rows.push_back(parseCsvLine(line));
    // A row cut short by a kill while it was written: the job runs again.
    if (rows.back().size() != width) rows.pop_back();
  }
  return rows;
}

void appendLine(const fs::path& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  out << line << "\n";
  out.flush();
  BIGBATCH_REQUIRE(out.good(), IoError, "cannot append to '{}'; check the disk and permissions",
                   path.string());
}

std::string joinValues(const std::vector<std::string>& values) {
  std::string s;
  for (const auto& v : values) s += (s.empty() ? "" : " ") + v;
  return s;
}

double toDouble(const std::string& s) { return s.empty() ? 0.0 : std::stod(s); }

std::string outcomeStatus(const TrialOutcome& o) {
  return !o.ok ? "failed" : o.seconds == 0 ? "carried" : "ok";
}

}  // namespace

double tuneMetric(TuneObjective objective, const TrialOutcome& o) {
  if (objective == TuneObjective::kAccuracy) return o.accuracy;
  return o.reachedTarget ? o.timeToTargetS : 1e6 * (2.0 - o.accuracy);
}

Tuner::Tuner(TuneOptions options, SearchSpace space, TrialRunner& runner)
    : options_(std::move(options)),
      space_(std::move(space)),
      runner_(runner),
      asha_(options_.asha) {
  BIGBATCH_REQUIRE(options_.parallel >= 1, InvalidArgument,
                   "tune: --parallel must be at least 1 (got {})", options_.parallel);
  BIGBATCH_REQUIRE(options_.extraSeeds >= 0, InvalidArgument,
                   "tune: --seeds must be at least 0 (got {})", options_.extraSeeds);
}

TrialJob Tuner::makeJob(const AshaScheduler::Job& job) const {
  TrialJob t;
  t.name = fmt::format("trial-{:03d}", job.trial);
  t.trial = job.trial;
  t.rung = job.rung;
  // The top rung runs the recipe's whole budget; the others pause at r_k.
  t.stopAfterEpoch =
      job.rung == asha_.rungs() - 1 ? 0 : std::max<int64_t>(1, std::llround(job.epochs));
  t.sets = valuesOf(job.trial);
  return t;
}

std::vector<std::string> Tuner::valuesOf(int trial) const {
  return trial == 0 && !options_.firstValues.empty() ? options_.firstValues : space_.draw(trial);
}

// The epochs `job` adds to its trial's run, at most.
int64_t Tuner::newEpochs(const AshaScheduler::Job& job) const {
  const int64_t before =
      job.trial < static_cast<int>(last_.size()) && last_[job.trial] ? last_[job.trial]->epochs : 0;
  return std::max<int64_t>(0, std::llround(job.epochs) - before);
}

// Hands jobs to free slots while the scheduler has any (and the epoch
// budget allows the next). A trial whose run
// already ended is settled at once with its outcome carried (no run).
void Tuner::fill() {
  for (;;) {
    int free = -1;
    for (size_t s = 0; s < slots_.size() && free < 0; ++s) {
      if (!slots_[s]) free = static_cast<int>(s);
    }
    if (free < 0 || budgetSpent_) return;
    AshaScheduler probe = asha_;
    const std::optional<AshaScheduler::Job> job = probe.next();
    if (!job) return;
    const auto& before = job->trial < static_cast<int>(last_.size())
                             ? last_[job->trial]
                             : std::optional<TrialOutcome>();
    const bool carry = before && before->complete;
    const int64_t cost = carry ? 0 : newEpochs(*job);
    if (options_.budgetEpochs > 0 &&
        result_.searchEpochs + committed_ + cost > options_.budgetEpochs) {
      budgetSpent_ = true;
      fmt::print(
          "tune: the budget of {} epochs is spent ({} trained, {} running); trial {:03d} "
          "rung {} ({} more epochs) does not fit — the search ends here\n",
          options_.budgetEpochs, result_.searchEpochs, committed_, job->trial, job->rung, cost);
      std::fflush(stdout);
      return;
    }
    asha_ = probe;
    if (carry) {
      slots_[free] = Handed{*job, true, 0};
      TrialOutcome carried = *before;
      carried.seconds = 0;
      settle(free, carried);
      continue;
    }
    slots_[free] = Handed{*job, false, cost};
    committed_ += cost;
    if (replayed_ >= journal_.size()) {
      runner_.start(free, makeJob(*job));
      slots_[free]->started = true;
    }
  }
}

// The next settled job: from the journal while replaying, else from the
// runner (first starting the jobs a killed tune left running).
std::pair<int, TrialOutcome> Tuner::nextOutcome() {
  if (replayed_ < journal_.size()) {
    const auto& row = journal_[replayed_];
    const int trial = std::stoi(row[0]), rung = std::stoi(row[1]);
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (slots_[s] && slots_[s]->job.trial == trial && slots_[s]->job.rung == rung) {
        TrialOutcome o;
        o.ok = row[3] != "failed";
        o.epochs = std::stoll(row[2]);
        o.accuracy = toDouble(row[5]);
        o.reachedTarget = row[6] == "true";
        o.timeToTargetS = toDouble(row[7]);
        o.complete = row[8] == "true";
        o.seconds = toDouble(row[9]);
        o.error = row[11];
        return {static_cast<int>(s), o};
      }
    }
    BIGBATCH_THROW(InvalidArgument,
                   "tune --resume: row {} of {}/results.csv (trial {}, rung {}) is not a job this "
                   "search hands out — the journal was written by another search (space, "
                   "--trials, --eta, epochs or --parallel); resume with the same settings, or "
                   "start a new --dir",
                   replayed_ + 2, options_.dir, trial, rung);
  }
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s] && !slots_[s]->started) {
      runner_.start(static_cast<int>(s), makeJob(slots_[s]->job));
      slots_[s]->started = true;
    }
  }
  return runner_.wait();
}

void Tuner::settle(int slot, const TrialOutcome& o) {
  const AshaScheduler::Job job = slots_[slot]->job;
  committed_ -= slots_[slot]->cost;
  slots_[slot].reset();
  const std::vector<std::string> values = valuesOf(job.trial);
  const double metric = o.ok ? tuneMetric(options_.objective, o) : 0.0;
  if (replayed_ < journal_.size()) {
    const auto& row = journal_[replayed_];
    BIGBATCH_REQUIRE(row[0] == std::to_string(job.trial) && row[1] == std::to_string(job.rung),
                     InvalidArgument,
                     "tune --resume: row {} of {}/results.csv is trial {} rung {}, where this "
                     "search settles trial {} rung {} — written by another search; resume with "
                     "the same settings, or start a new --dir",
                     replayed_ + 2, options_.dir, row[0], row[1], job.trial, job.rung);
    BIGBATCH_REQUIRE(row[10] == joinValues(values), InvalidArgument,
                     "tune --resume: trial {} of {}/results.csv had the values '{}', this search "
                     "draws '{}' — another space or --seed; resume with the same settings, or "
                     "start a new --dir",
                     job.trial, options_.dir, row[10], joinValues(values));
    ++replayed_;
  } else {
    appendLine(fs::path(options_.dir) / "results.csv",
               fmt::format("{},{},{},{},{:.6g},{:.6g},{},{:.3f},{},{:.3f},{},{}", job.trial,
                           job.rung, o.epochs, outcomeStatus(o), metric, o.accuracy,
                           o.reachedTarget ? "true" : "false", o.timeToTargetS,
                           o.complete ? "true" : "false", o.seconds, csvField(joinValues(values)),
                           csvField(o.error)));
  }
  ++result_.jobs;
  if (static_cast<int>(last_.size()) <= job.trial) last_.resize(job.trial + 1);
  if (!o.ok) {
    ++result_.failed;
    asha_.fail(job.trial, job.rung);
    fmt::print("tune: trial {:03d} rung {} failed: {}\n", job.trial, job.rung, o.error);
    std::fflush(stdout);
    return;
  }
  const int64_t before = last_[job.trial] ? last_[job.trial]->epochs : 0;
  result_.searchEpochs += std::max<int64_t>(0, o.epochs - before);
  last_[job.trial] = o;
  asha_.report(job.trial, job.rung, metric);
  fmt::print("tune: trial {:03d} rung {} epoch {:>3}: accuracy {:.2f} %{}{} | {}\n", job.trial,
             job.rung, o.epochs, 100 * o.accuracy,
             o.reachedTarget ? fmt::format(", target at {:.1f} s", o.timeToTargetS) : "",
             o.seconds == 0 ? " (carried: its run had ended)" : "", joinValues(values));
  std::fflush(stdout);
}

TuneResult Tuner::run() {
  const fs::path dir(options_.dir);
  fs::create_directories(dir);
  const fs::path results = dir / "results.csv";
  BIGBATCH_REQUIRE(options_.resume || !fs::exists(results), InvalidArgument,
                   "'{}' already holds a tune (results.csv); continue it with --resume, or give "
                   "another --dir",
                   options_.dir);
  if (options_.resume) journal_ = readJournal(results, kResultsHeader);
  if (!fs::exists(results)) appendLine(results, kResultsHeader);
  if (!journal_.empty()) {
    fmt::print("tune: resuming {}: {} job(s) settled before\n", options_.dir, journal_.size());
  }

  slots_.assign(static_cast<size_t>(options_.parallel), std::nullopt);
  fill();
  for (;;) {
    bool busy = false;
    for (const auto& s : slots_) busy = busy || s.has_value();
    if (!busy) break;
    const auto [slot, outcome] = nextOutcome();
    settle(slot, outcome);
    fill();
  }
  BIGBATCH_REQUIRE(replayed_ == journal_.size(), InvalidArgument,
                   "tune --resume: {}/results.csv holds {} more row(s) than this search hands out "
                   "— written by another search; resume with the same settings, or start a new "
                   "--dir",
                   options_.dir, journal_.size() - replayed_);
  const std::optional<int> best = asha_.best();
  BIGBATCH_REQUIRE(best.has_value(), Error,
                   "tune: every trial failed; the reasons are in {}/results.csv and the logs in "
                   "{}/logs/",
                   options_.dir, options_.dir);
  result_.bestTrial = *best;
  result_.bestValues = valuesOf(*best);
  result_.seeds.push_back(*last_[*best]);
  result_.seedValues.push_back(options_.seed);
  runSeeds(result_);
  return result_;
}

// The best trial's whole run again with seeds seed+1 .. seed+extraSeeds.
void Tuner::runSeeds(TuneResult& result) {
  const fs::path path = fs::path(options_.dir) / "seeds.csv";
  std::map<int64_t, TrialOutcome> done;
  if (options_.resume) {
    for (const auto& row : readJournal(path, kSeedsHeader)) {
      TrialOutcome o;
      o.ok = row[1] != "failed";
      o.accuracy = toDouble(row[2]);
      o.reachedTarget = row[3] == "true";
      o.timeToTargetS = toDouble(row[4]);
      o.epochs = std::stoll(row[5]);
      o.seconds = toDouble(row[6]);
      o.error = row[7];
      o.complete = true;
      done[std::stoll(row[0])] = o;
    }
  }
  if (!fs::exists(path)) appendLine(path, kSeedsHeader);
  std::vector<int64_t> todo;
  for (int i = 1; i <= options_.extraSeeds; ++i) {
    if (!done.count(options_.seed + i)) todo.push_back(options_.seed + i);
  }
  std::map<int, int64_t> running;  // slot -> seed
  size_t next = 0;
  while (next < todo.size() || !running.empty()) {
    while (next < todo.size() && static_cast<int>(running.size()) < options_.parallel) {
      int slot = 0;
      while (running.count(slot)) ++slot;
      TrialJob job;
      job.name = fmt::format("trial-{:03d}-seed{}", result.bestTrial, todo[next]);
      job.trial = result.bestTrial;
      job.rung = -1;
      job.sets = result.bestValues;
      job.sets.push_back(fmt::format("run.seed={}", todo[next]));
      runner_.start(slot, job);
      running[slot] = todo[next++];
    }
    const auto [slot, o] = runner_.wait();
    const int64_t seed = running.at(slot);
    running.erase(slot);
    appendLine(
        path, fmt::format("{},{},{:.6g},{},{:.3f},{},{:.3f},{}", seed, o.ok ? "ok" : "failed",
                          o.accuracy, o.reachedTarget ? "true" : "false", o.timeToTargetS, o.epochs,
                          o.seconds, csvField(o.error)));
    fmt::print(
        "tune: best trial {:03d} with seed {}: {}\n", result.bestTrial, seed,
        o.ok ? fmt::format(
                   "accuracy {:.2f} %{}", 100 * o.accuracy,
                   o.reachedTarget ? fmt::format(", target at {:.1f} s", o.timeToTargetS) : "")
             : "failed: " + o.error);
    std::fflush(stdout);
    done[seed] = o;
  }
  for (int i = 1; i <= options_.extraSeeds; ++i) {
    const TrialOutcome& o = done.at(options_.seed + i);
    result.seeds.push_back(o);
    result.seedValues.push_back(options_.seed + i);
    result.seedEpochs += o.epochs;
  }
}

}  // namespace bigbatch
