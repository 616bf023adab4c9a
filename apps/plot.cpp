#include "plot.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <algorithm>
#include <filesystem>
#include <limits>
#include <fstream>
#include <map>
#include <sstream>

#include "bigbatch/common/config.h"
#include "bigbatch/common/error.h"
#include "bigbatch/train/config_schema.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

struct Run {
  std::string label;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

std::vector<std::string> splitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

Run loadRun(const std::string& dir) {
  Run run;
  const fs::path metrics = fs::path(dir) / "metrics.csv";
  std::ifstream in(metrics);
  BIGBATCH_REQUIRE(in.good(), IoError, "'{}' has no metrics.csv: is it a bigbatch run directory?",
                   dir);
  std::string line;
  std::getline(in, line);
  run.header = splitCsv(line);
  while (std::getline(in, line)) {
    if (!line.empty()) run.rows.push_back(splitCsv(line));
  }
  BIGBATCH_REQUIRE(!run.rows.empty(), InvalidArgument, "'{}' holds no finished epoch yet",
                   metrics.string());
  // The label: the run's name and the settings that tell runs apart.
  std::string label = fs::path(dir).filename().string();
  if (label.empty()) label = fs::path(dir).parent_path().filename().string();
  const fs::path configPath = fs::path(dir) / "config.toml";
  const fs::path summaryPath = fs::path(dir) / "summary.json";
  if (fs::exists(configPath)) {
    Config c = defaultTrainingConfig();
    c.mergeFile(configPath.string());
    int64_t world = 0;
    double peakLr = c.getFloat("optim.lr");
    if (fs::exists(summaryPath)) {
      std::ifstream s(summaryPath);
      const auto summary = nlohmann::json::parse(s);
      world = summary.value("world_size", int64_t{0});
      peakLr = summary.value("peak_lr", peakLr);  // lr_per_256 recipes
    }
    label += fmt::format(" ({}{} x {}{}, {} lr {:g})", c.getString("model.name"),
                         world ? fmt::format(", {}", world) : std::string(),
                         c.getInt("train.batch_size"),
                         c.getInt("train.accumulation_steps") > 1
                             ? fmt::format(" x {}", c.getInt("train.accumulation_steps"))
                             : std::string(),
                         c.getString("optim.name"), peakLr);
  }
  run.label = label;
  return run;
}

int column(const Run& run, const std::string& name, const std::string& dir) {
  for (size_t i = 0; i < run.header.size(); ++i) {
    if (run.header[i] == name) return static_cast<int>(i);
  }
  BIGBATCH_THROW(InvalidArgument, "metrics.csv of '{}' has no column '{}'", dir, name);
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

std::vector<std::string> plotRuns(const std::vector<std::string>& runDirs, const std::string& outDir) {
  BIGBATCH_REQUIRE(!runDirs.empty(), InvalidArgument, "give at least one run directory");
  BIGBATCH_REQUIRE(std::system("command -v gnuplot >/dev/null 2>&1") == 0, IoError,
                   "gnuplot is not installed; run scripts/setup (apt-get install gnuplot-nox)");
  fs::create_directories(outDir);
  const fs::path data = fs::path(outDir) / ".plot-data";
  fs::create_directories(data);

  // One whitespace-separated data file per run: epoch step lr train_loss
  // train_acc test_acc img_s global_batch (accuracies in %; "NaN" where not
  // evaluated, or for a column that a run of an older bigbatch lacks).
  std::vector<Run> runs;
  std::vector<bool> hasBatch;  // runs of older bigbatch versions lack global_batch
  for (size_t r = 0; r < runDirs.size(); ++r) {
    Run run = loadRun(runDirs[r]);
    const std::vector<std::string> cols = {"epoch", "step", "lr", "train_loss", "train_acc",
                                           "test_acc", "img_s", "global_batch"};
    std::vector<int> idx;
    for (const auto& c : cols) {
      const bool optional = c == "global_batch";
      idx.push_back(optional && std::find(run.header.begin(), run.header.end(), c) == run.header.end()
                        ? std::numeric_limits<int>::max()
                        : column(run, c, runDirs[r]));
    }
    hasBatch.push_back(idx.back() != std::numeric_limits<int>::max());
    std::ofstream out(data / fmt::format("run{}.dat", r));
    for (const auto& row : run.rows) {
      for (size_t k = 0; k < idx.size(); ++k) {
        std::string v = static_cast<size_t>(idx[k]) < row.size() ? row[idx[k]] : "";
        if (v.empty()) v = "NaN";
        if ((cols[k] == "train_acc" || cols[k] == "test_acc") && v != "NaN") {
          v = fmt::format("{:.4f}", 100.0 * std::stod(v));
        }
        out << v << (k + 1 < idx.size() ? " " : "\n");
      }
    }
    runs.push_back(std::move(run));
  }

  struct Chart {
    std::string file, title, xlabel, ylabel;
    std::vector<std::pair<int, std::string>> series;  // (column, suffix)
    int xcol;
  };
  const std::vector<Chart> charts = {
      {"accuracy.png", "Accuracy", "epoch", "accuracy (%)", {{6, "test"}, {5, "train"}}, 1},
      {"loss.png", "Training loss", "epoch", "loss", {{4, ""}}, 1},
      {"lr.png", "Learning rate (end of each epoch)", "step", "learning rate", {{3, ""}}, 2},
      {"throughput.png", "Throughput", "epoch", "images / s", {{7, ""}}, 1},
      {"batch_size.png", "Global batch size (each epoch)", "step", "images per step", {{8, ""}}, 2},
  };
  std::string script = "set terminal pngcairo size 1000,600 noenhanced\nset grid\nset key below\n";
  std::vector<std::string> written;
  for (const auto& chart : charts) {
    const bool batchChart = chart.file == "batch_size.png";
    if (batchChart && std::none_of(hasBatch.begin(), hasBatch.end(), [](bool b) { return b; })) {
      continue;
    }
    const std::string png = (fs::path(outDir) / chart.file).string();
    script += fmt::format("set output {}\nset title {}\nset xlabel {}\nset ylabel {}\nplot ",
                          quote(png), quote(chart.title), quote(chart.xlabel), quote(chart.ylabel));
    bool first = true;
    for (size_t r = 0; r < runs.size(); ++r) {
      if (batchChart && !hasBatch[r]) continue;
      for (const auto& [col, suffix] : chart.series) {
        const std::string title = suffix.empty() ? runs[r].label : runs[r].label + " " + suffix;
        script += fmt::format("{}{} using {}:{} with linespoints lc {} dt {} title {}",
                              first ? "" : ", ", quote((data / fmt::format("run{}.dat", r)).string()),
                              chart.xcol, col, r + 1, suffix == "train" ? 2 : 1, quote(title));
        first = false;
      }
    }
    script += "\n";
    written.push_back(png);
  }
  const fs::path scriptPath = data / "plot.gp";
  std::ofstream(scriptPath) << script;
  const std::string cmd = fmt::format("gnuplot {} 2>{}", quote(scriptPath.string()),
                                      quote((data / "gnuplot.log").string()));
  BIGBATCH_REQUIRE(std::system(cmd.c_str()) == 0, IoError, "gnuplot failed; see {}",
                   (data / "gnuplot.log").string());
  fs::remove_all(data);
  return written;
}

std::string plotScaling(const std::string& csvPath, const std::string& outDir) {
  BIGBATCH_REQUIRE(std::system("command -v gnuplot >/dev/null 2>&1") == 0, IoError,
                   "gnuplot is not installed; run scripts/setup (apt-get install gnuplot-nox)");
  std::ifstream in(csvPath);
  BIGBATCH_REQUIRE(in.good(), IoError, "cannot read scaling results '{}'", csvPath);
  std::string line;
  std::getline(in, line);
  const auto header = splitCsv(line);
  auto col = [&](const char* name) {
    auto it = std::find(header.begin(), header.end(), name);
    BIGBATCH_REQUIRE(
        it != header.end(), InvalidArgument,
        "'{}' has no column '{}' (expected bench/scaling.sh output: workers,img_s,...)", csvPath,
        name);
    return static_cast<size_t>(it - header.begin());
  };
  const size_t w = col("workers"), t = col("img_s");
  std::vector<std::pair<double, double>> points;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto cells = splitCsv(line);
    BIGBATCH_REQUIRE(cells.size() > std::max(w, t), InvalidArgument, "'{}': short row '{}'",
                     csvPath, line);
    try {
      points.emplace_back(std::stod(cells[w]), std::stod(cells[t]));
    } catch (const std::exception&) {
      BIGBATCH_THROW(InvalidArgument, "'{}': row '{}' is not numeric", csvPath, line);
    }
  }
  BIGBATCH_REQUIRE(!points.empty(), InvalidArgument, "'{}' holds no results", csvPath);
  std::sort(points.begin(), points.end());
  const double perWorker = points.front().second / points.front().first;
  fs::create_directories(outDir);
  const fs::path data = fs::path(outDir) / ".plot-data";
  fs::create_directories(data);
  {
    std::ofstream out(data / "scaling.dat");
    for (const auto& [workers, imgS] : points) {
      out << workers << " " << imgS << " " << workers * perWorker << "\n";
    }
  }
  const std::string png = (fs::path(outDir) / "scaling.png").string();
  const std::string dat = quote((data / "scaling.dat").string());
  std::ofstream(data / "plot.gp") << fmt::format(
      "set terminal pngcairo size 1000,600 noenhanced\nset grid\nset key below\n"
      "set output {}\nset title \"Throughput vs workers\"\nset xlabel \"workers\"\n"
      "set ylabel \"images / s\"\nset xrange [0:*]\nset yrange [0:*]\n"
      "plot {} using 1:2 with linespoints lw 2 title \"measured\", "
      "{} using 1:3 with lines dt 2 title \"ideal (linear from the smallest run)\"\n",
      quote(png), dat, dat);
  const std::string cmd = fmt::format("gnuplot {} 2>{}", quote((data / "plot.gp").string()),
                                      quote((data / "gnuplot.log").string()));
  BIGBATCH_REQUIRE(std::system(cmd.c_str()) == 0, IoError, "gnuplot failed; see {}",
                   (data / "gnuplot.log").string());
  fs::remove_all(data);
  return png;
}

}  // namespace bigbatch
