// Helpers of the training-run tests: in-process ranks (a thread each, one
// InProcessCommunicator group), seeded models and jobs, and readers of a
// run's metrics.csv and mlperf.log. Header-only, for tests/train only.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/train/trainer.h"

namespace bigbatch::test_runs {

// Runs body(rank) for `n` in-process ranks, one thread each, and waits for all.
inline void onRanks(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r) ranks.emplace_back(body, r);
  for (auto& t : ranks) t.join();
}

// Trains one in-process rank per job (a thread each, with the job's own
// model) on `c` into `dir`: each rank's result and error ("" if none).
struct RankRuns {
  std::vector<TrainResult> results;
  std::vector<std::string> errors;
};
inline RankRuns trainInProcess(const Config& c, const std::string& dir,
                               std::vector<TrainingJob>& jobs) {
  const int n = static_cast<int>(jobs.size());
  auto comms = makeInProcessGroup(n);
  RankRuns runs{std::vector<TrainResult>(n), std::vector<std::string>(n)};
  onRanks(n, [&](int r) {
    TrainOptions o;
    o.comm = comms[r].get();
    o.runDir = dir;
    o.verbosity = Verbosity::kQuiet;
    try {
      runs.results[r] = train(c, o, jobs[r]);
    } catch (const std::exception& e) {
      runs.errors[r] = e.what();
    }
  });
  return runs;
}

inline std::shared_ptr<ImageClassifierImpl> seededModel() {
  torch::manual_seed(1);
  return buildModel(ModelOptions{});  // the default recipe's cnn, as run.seed = 1 builds it
}

// One job per in-process rank, each with its own copy of that model.
inline std::vector<TrainingJob> seededJobs(int n) {
  std::vector<TrainingJob> jobs(n);
  for (auto& job : jobs) job.model = seededModel();
  return jobs;
}

inline std::vector<nlohmann::json> readMllog(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_EQ(line.rfind(":::MLLOG {", 0), 0u) << line;
    lines.push_back(nlohmann::json::parse(line.substr(9)));
  }
  return lines;
}

inline std::vector<std::map<std::string, std::string>> readCsv(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<std::string> header;
  std::vector<std::map<std::string, std::string>> rows;
  auto split = [](const std::string& l) {
    std::vector<std::string> out;
    std::stringstream ss(l);
    std::string cell;
    while (std::getline(ss, cell, ',')) out.push_back(cell);
    return out;
  };
  std::getline(in, line);
  header = split(line);
  while (std::getline(in, line)) {
    auto cells = split(line);
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < cells.size(); ++i) row[header[i]] = cells[i];
    rows.push_back(row);
  }
  return rows;
}

}  // namespace bigbatch::test_runs
