// The CLI as a user drives it: exit codes and messages for bad input.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_run.h"

namespace {

std::string writeConfig(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(Cli, HelpListsOptionsWithDefaults) {
  Outcome o = run("train --help");
  EXPECT_EQ(o.status, 0);
  for (const char* s : {"--set", "--run-dir", "--overwrite", "--quiet", "default"}) {
    EXPECT_NE(o.output.find(s), std::string::npos) << s << "\n" << o.output;
  }
}

TEST(Cli, KeysListsEveryKey) {
  Outcome o = run("keys");
  EXPECT_EQ(o.status, 0);
  for (const char* s : {"optim.lr", "train.batch_size", "model.widths", "train.target_accuracy"}) {
    EXPECT_NE(o.output.find(s), std::string::npos) << s;
  }
}

TEST(Cli, UnknownKeyInFileFailsWithHint) {
  const auto cfg = writeConfig("unknown.toml", "[optim]\nlearning_rate = 0.1\n");
  Outcome o = run("train " + cfg + " --run-dir " + ::testing::TempDir() + "/cli_unknown");
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_NE(o.output.find("unknown config key 'optim.learning_rate'"), std::string::npos) << o.output;
}

TEST(Cli, BadOverrideFailsNamingKey) {
  const auto cfg = writeConfig("ok.toml", "[train]\nepochs = 1\n");
  Outcome o = run("train " + cfg + " --set train.batch_size=-5 --run-dir " + ::testing::TempDir() +
                  "/cli_bad");
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_NE(o.output.find("'train.batch_size'"), std::string::npos) << o.output;
  EXPECT_NE(o.output.find("out of range"), std::string::npos) << o.output;
}

TEST(Cli, MissingConfigFileAndUnknownFlag) {
  EXPECT_NE(run("train /nonexistent.toml").status, 0);
  // A malformed command line exits 2 (README), a failed run 1.
  EXPECT_EQ(run("train --frobnicate").status, 2);
  EXPECT_EQ(run("").status, 2);  // a subcommand is required
  const Outcome workers = run("train " + writeConfig("workers_x.toml", "") + " --workers x");
  EXPECT_EQ(workers.status, 2) << workers.output;
  EXPECT_NE(workers.output.find("--workers"), std::string::npos) << workers.output;
  EXPECT_EQ(run("--help").status, 0);
}

// `args` ends with status 1 and `words` said once by the launcher: no rank
// started (no MPI abort, no run directory `runDir`).
void expectRefusedBeforeWorkers(const std::string& args, const std::string& words,
                                const std::string& runDir) {
  const Outcome o = run(args);
  EXPECT_EQ(o.status, 1) << args << "\n" << o.output;
  const size_t at = o.output.find(words);
  EXPECT_NE(at, std::string::npos) << args << "\n" << o.output;
  EXPECT_EQ(o.output.find(words, at + 1), std::string::npos) << "more than once:\n" << o.output;
  EXPECT_EQ(o.output.find("MPI_ABORT"), std::string::npos) << o.output;
  EXPECT_FALSE(std::filesystem::exists(runDir)) << args;
}

TEST(Cli, BadDataPathFailsCleanly) {
  const auto cfg = writeConfig("nodata.toml", "[data]\npath = \"/nonexistent-data\"\n");
  Outcome o = run("train " + cfg + " --run-dir " + ::testing::TempDir() + "/cli_nodata --overwrite");
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_NE(o.output.find("apt-get install dataset-fashion-mnist"), std::string::npos) << o.output;
  // With workers to launch, the launcher checks the data first: one error,
  // no rank started (no run directory, no MPI abort), for every data set
  // that reads files.
  const std::string runDir = ::testing::TempDir() + "/cli_nodata_workers";
  std::filesystem::remove_all(runDir);
  const std::string empty = ::testing::TempDir() + "/cli_empty_data";
  std::filesystem::create_directories(empty);
  const std::pair<std::string, std::string> cases[] = {
      {"", "Fashion-MNIST file 'train-images-idx3-ubyte[.gz]' not found in '/nonexistent-data'"},
      {"--set data.dataset=cifar10 --set data.path=" + empty, "data_batch_1.bin is missing"},
      {"--set data.dataset=folder --set data.path=" + empty, "/train' is not a directory"}};
  for (const auto& [sets, words] : cases) {
    expectRefusedBeforeWorkers("train " + cfg + " --workers 2 " + sets + " --run-dir " + runDir,
                               words, runDir);
  }
  std::filesystem::remove_all(empty);
}

// The launcher's other checks before it starts workers: a run directory
// that holds a run, an --init-from file that is no state dict, a --resume
// checkpoint that is not there. One message each, nothing started.
TEST(Cli, RunSetUpMistakesAreOneErrorBeforeAnyWorkerStarts) {
  const auto cfg = writeConfig("setup.toml", "[train]\nepochs = 1\n");
  const std::string used = ::testing::TempDir() + "/cli_used_run";
  std::filesystem::create_directories(used);
  std::ofstream(used + "/mlperf.log") << ":::MLLOG {}\n";
  const std::string fresh = ::testing::TempDir() + "/cli_fresh_run";
  std::filesystem::remove_all(fresh);
  const std::pair<std::string, std::string> cases[] = {
      {"--run-dir " + used, "already holds a run (mlperf.log exists)"},
      {"--run-dir " + fresh + " --init-from " + cfg, "is not a PyTorch state-dict file"},
      {"--run-dir " + fresh + " --resume " + fresh + "/ckpt-000000001.pt",
       "no such file or directory"}};
  for (const auto& [args, words] : cases) {
    expectRefusedBeforeWorkers("train " + cfg + " --workers 2 " + args, words, fresh);
  }
  EXPECT_TRUE(std::filesystem::exists(used + "/mlperf.log"));  // nothing lost
  std::filesystem::remove_all(used);
}

}  // namespace

namespace {

// On 3 ranks, where every algorithm really reduces: each JSON row parses,
// says 3 ranks and has no wrong element (the crafted inputs' exact sums).
TEST(Cli, BenchAllreduceJsonRows) {
  const std::string cmd = underMpirun(3) + BIGBATCH_BINARY +
                          " bench allreduce --min-bytes 4K --max-bytes 8K --algorithms "
                          "shm,ring,halving_doubling,mpi --json";
  int status = 0;
  const std::string out = capture(cmd, status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  std::istringstream lines(out);
  int rows = 0, checked = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{", 0) != 0) continue;
    const nlohmann::json row = nlohmann::json::parse(line);  // throws on a malformed row
    ++rows;
    EXPECT_EQ(row["ranks"], 3) << line;
    EXPECT_GT(row["busbw"].get<double>(), 0) << line;
    if (row["algorithm"] == "memcpy") continue;
    EXPECT_EQ(row["wrong"], 0) << line;
    ++checked;
  }
  EXPECT_EQ(rows, 10) << out;    // 2 sizes x (memcpy + 4 algorithms), from rank 0 only
  EXPECT_EQ(checked, 8) << out;
}

// On 3 ranks, the partitioned optimizer: a row per optimizer from rank 0,
// each rank holding a third of every bucket's state.
TEST(Cli, BenchOptimPartitionedStateIsAThirdPerRank) {
  const std::string cmd = underMpirun(3) + BIGBATCH_BINARY +
                          " bench optim --partitioned --models cnn --iterations 3 --threads 1 "
                          "--json 2>&1";
  int status = 0;
  const std::string out = capture(cmd, status);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  std::istringstream lines(out);
  int rows = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{", 0) != 0) continue;
    const nlohmann::json row = nlohmann::json::parse(line);
    ++rows;
    EXPECT_EQ(row["ranks"], 3) << line;
    const auto whole = row["state_bytes_whole"].get<int64_t>() - 8;  // less the step counter
    const auto part = row["state_bytes_partitioned"].get<int64_t>() - 8;
    const int64_t buffers = row["optimizer"] == "lamb" ? 2 : 1;
    EXPECT_EQ(whole, 4 * buffers * row["values"].get<int64_t>()) << line;
    // Chunk sizes differ by at most one value per bucket (a few buckets here).
    EXPECT_LE(std::abs(3 * part - whole), 3 * 4 * buffers * 16) << line;
    EXPECT_GT(part, 0) << line;
    EXPECT_GT(row["whole_ms"].get<double>(), 0) << line;
    EXPECT_GT(row["partitioned_ms"].get<double>(), 0) << line;
  }
  EXPECT_EQ(rows, 3) << out;  // lars, lamb, sgd, from rank 0 only
}

// `--workers N` gives each rank as many CPUs as it has threads: with one
// thread each the ranks are pinned to CPUs of their own; with more threads
// than the machine has CPUs for, they share all of them (a rank bound to
// one core while it runs two threads was the fault).
TEST(Cli, WorkersGetAsManyCpusAsThreads) {
  const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  for (int threads : {1, cpus}) {
    const std::string dir = ::testing::TempDir() + "/cpus_" + std::to_string(threads) + "_" +
                            std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    const std::string cfg = writeConfig("cpus.toml", "[train]\nepochs = 1\n");
    const Outcome o = run("train " + cfg + " --workers 2 --run-dir " + dir +
                          " --set data.train_samples=512 --set data.eval_samples=200 -q" +
                          " --set run.threads=" + std::to_string(threads));
    ASSERT_EQ(o.status, 0) << o.output;
    std::ifstream in(dir + "/summary.json");
    const nlohmann::json s = nlohmann::json::parse(in);
    EXPECT_EQ(s["threads_per_rank"], threads);
    EXPECT_GE(s["allowed_cpus_per_rank"].get<int>(), threads) << o.output;
    if (2 * threads <= cpus) {
      EXPECT_EQ(s["allowed_cpus_per_rank"], threads);  // pinned, not shared
    }
    EXPECT_EQ(o.output.find("take turns"), std::string::npos) << o.output;
    std::filesystem::remove_all(dir);
  }
}

TEST(Cli, BenchCountsOutOfRangeAreRejectedByName) {
  for (const char* args : {"bench optim --threads -1", "bench optim --iterations -5",
                           "bench allreduce --iters -2", "bench allreduce --timeout-ms 0",
                           "bench pipeline --prefetch 0", "bench pipeline --cache-mb x",
                           "bench pipeline --workers 0", "bench pipeline --size -1",
                           "bench pipeline --batch 0", "bench pipeline --epochs 0"}) {
    Outcome o = run(args);
    EXPECT_EQ(o.status, 2) << args << "\n" << o.output;
    const std::string option = std::string(args).substr(std::string(args).find("--"));
    const std::string name = option.substr(0, option.find(' '));
    EXPECT_NE(o.output.find(name + ": must be a whole number"), std::string::npos)
        << args << "\n" << o.output;
  }
  Outcome o = run("bench optim --models resnet18");
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_NE(o.output.find("'resnet18' is not resnet50 or cnn"), std::string::npos) << o.output;
  // A user's mistake is named without the C++ condition that caught it.
  EXPECT_EQ(o.output.find("check failed"), std::string::npos) << o.output;
}

TEST(Cli, BenchAllreduceRejectsUnknownAlgorithm) {
  Outcome o = run("bench allreduce --algorithms tree");
  EXPECT_EQ(o.status, 1) << o.output;
  EXPECT_NE(o.output.find("unknown allreduce algorithm 'tree'"), std::string::npos) << o.output;
}

}  // namespace

namespace {

// docs/CONFIG.md is generated from the schema; a key added without
// regenerating it (`bigbatch keys --markdown`) fails here.
TEST(Cli, ConfigDocMatchesSchema) {
  // stdout only: a warning on stderr (from a library, under load) is not
  // part of the table.
  Outcome o = run("keys --markdown", /*stderrToo=*/false);
  ASSERT_EQ(o.status, 0);
  const char* src = std::getenv("BIGBATCH_SOURCE_DIR");
  ASSERT_NE(src, nullptr);
  std::ifstream in(std::string(src) + "/docs/CONFIG.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (doc.find(o.output) == std::string::npos) {
    // Name the first table line the doc lacks, so a failure says what.
    std::istringstream lines(o.output);
    std::string line;
    while (std::getline(lines, line) && doc.find(line) != std::string::npos) {
    }
    ADD_FAILURE() << "docs/CONFIG.md is stale: regenerate it with `bigbatch keys --markdown`; "
                  << "first line of the generated table not in the doc: '" << line << "' ("
                  << o.output.size() << " bytes generated)";
  }
}

}  // namespace

namespace {

// `bigbatch plot` on a run directory written here (the columns of metrics.csv).
TEST(Cli, PlotWritesPngCharts) {
  const std::string dir = ::testing::TempDir() + "/plot_run_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/metrics.csv")
      << "epoch,step,lr,train_loss,train_acc,test_acc,epoch_time_s,img_s,elapsed_s,data_s,"
         "forward_s,backward_s,comm_wait_s,comm_wait_min_s,comm_wait_max_s,optimizer_s,eval_s,"
         "global_batch,momentum,skipped_steps\n"
         "1,469,0.09,1.1,0.74,0.80,17,3500,17,0.1,5,11,0.5,0.4,0.6,0.1,0.2,128,0.9,0\n"
         "2,938,0.05,0.8,0.88,,17,3600,34,0.1,5,11,0.5,0.4,0.6,0.1,0,128,0.9,0\n"
         "3,1172,0.01,0.7,0.90,0.91,17,3550,51,0.1,5,11,0.5,0.4,0.6,0.1,0.2,256,0.9,0\n";
  const std::string out = dir + "/plots";
  Outcome o = run("plot " + dir + " " + dir + " -o " + out);
  ASSERT_EQ(o.status, 0) << o.output;
  for (const char* f : {"accuracy.png", "loss.png", "lr.png", "throughput.png", "batch_size.png"}) {
    std::ifstream png(out + "/" + f, std::ios::binary);
    char magic[4] = {};
    png.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG") << f;
  }
  Outcome bad = run("plot " + out);  // no metrics.csv there
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("no metrics.csv"), std::string::npos) << bad.output;

  // A scaling benchmark's CSV gives scaling.png; a CSV without the columns
  // is refused naming the missing one.
  std::ofstream(dir + "/scaling.csv") << "workers,img_s,global_batch,threads_per_rank\n"
                                         "1,1800,64,1\n2,3400,128,1\n";
  Outcome scaling = run("plot " + dir + "/scaling.csv -o " + out);
  ASSERT_EQ(scaling.status, 0) << scaling.output;
  std::ifstream png(out + "/scaling.png", std::ios::binary);
  char magic[4] = {};
  png.read(magic, 4);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  std::ofstream(dir + "/other.csv") << "a,b\n1,2\n";
  Outcome wrong = run("plot " + dir + "/other.csv -o " + out);
  EXPECT_EQ(wrong.status, 1);
  EXPECT_NE(wrong.output.find("no column 'workers'"), std::string::npos) << wrong.output;
  std::filesystem::remove_all(dir);
}

}  // namespace


namespace {

// Fashion-MNIST as an image folder: 60,000 + 10,000 JPEGs in 10 class
// folders whose sorted names keep the label order; refused over an existing
// export without --overwrite.
TEST(Cli, DataExportFolderWritesFashionMnist) {
  const std::string root = ::testing::TempDir() + "/fm_folder_" + std::to_string(::getpid());
  std::filesystem::remove_all(root);
  Outcome o = run("data export-folder fashion-mnist " + root);
  ASSERT_EQ(o.status, 0) << o.output;
  for (const auto& [split, expected] : {std::pair{"train", 60000}, std::pair{"val", 10000}}) {
    std::vector<std::string> classes;
    int files = 0;
    for (const auto& c : std::filesystem::directory_iterator(root + "/" + split)) {
      classes.push_back(c.path().filename().string());
      for (const auto& f : std::filesystem::directory_iterator(c.path())) {
        EXPECT_EQ(f.path().extension(), ".jpg");
        ++files;
      }
    }
    std::sort(classes.begin(), classes.end());
    ASSERT_EQ(classes.size(), 10u);
    EXPECT_EQ(classes.front(), "00_t-shirt");
    EXPECT_EQ(classes.back(), "09_ankle-boot");
    EXPECT_EQ(files, expected) << split;
  }
  Outcome again = run("data export-folder fashion-mnist " + root);
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.output.find("already holds train/ or val/"), std::string::npos) << again.output;
  Outcome other = run("data export-folder cifar10 " + root + "_x");
  EXPECT_EQ(other.status, 1);
  EXPECT_NE(other.output.find("only fashion-mnist"), std::string::npos) << other.output;
  std::filesystem::remove_all(root);
}

}  // namespace
