#include "bigbatch/plan/calibration.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "bigbatch/common/error.h"
#include "bigbatch/plan/allreduce_cost.h"

namespace bigbatch::plan {
namespace {

bool isPlanned(const std::string& name) {
  for (const auto& a : plannedAlgorithms())
    if (a == name) return true;
  return false;
}

}  // namespace

std::vector<AllreduceSample> parseBenchRows(const std::string& text) {
  std::vector<AllreduceSample> samples;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!row.is_object()) continue;  // headers, blank lines
    try {
      const std::string algorithm = row.at("algorithm").get<std::string>();
      if (!isPlanned(algorithm)) continue;
      AllreduceSample s;
      s.algorithm = algorithm;
      s.ranks = row.at("ranks").get<int>();
      s.localRanks = row.at("local_ranks").get<int>();
      s.bytes = row.at("bytes").get<double>();
      s.seconds = row.at("time_us").get<double>() * 1e-6;
      samples.push_back(s);
    } catch (const nlohmann::json::exception& e) {
      BIGBATCH_THROW(IoError,
                     "line {} of the allreduce rows lacks a field ({}); give the output of "
                     "`bigbatch bench allreduce --json`",
                     number, e.what());
    }
  }
  return samples;
}

LinkFit fitLink(const std::vector<AllreduceSample>& samples, const Cluster& known) {
  BIGBATCH_REQUIRE(!samples.empty(), InvalidArgument,
                   "no allreduce rows of ring, halving_doubling, recursive_doubling or "
                   "hierarchical to fit; run `bigbatch bench allreduce --json --algorithms ring`");
  const int ranks = samples.front().ranks, local = samples.front().localRanks;
  std::set<double> sizes;
  for (const auto& s : samples) {
    BIGBATCH_REQUIRE(s.ranks == ranks && s.localRanks == local, InvalidArgument,
                     "the rows mix world sizes ({} ranks, {} per host vs {} and {}); fit one "
                     "launch at a time",
                     ranks, local, s.ranks, s.localRanks);
    BIGBATCH_REQUIRE(s.seconds > 0, InvalidArgument, "a row of {} bytes has time {} s", s.bytes,
                     s.seconds);
    sizes.insert(s.bytes);
  }
  BIGBATCH_REQUIRE(ranks >= 2 && local >= 1 && ranks % local == 0, InvalidArgument,
                   "rows of {} ranks with {} on the first host cannot be fitted (need 2+ ranks, "
                   "the same number on every host)",
                   ranks, local);
  BIGBATCH_REQUIRE(sizes.size() >= 2, InvalidArgument,
                   "the rows have {} distinct message size(s); α and β need at least two "
                   "(e.g. --min-bytes 1K --max-bytes 64M)",
                   sizes.size());

  LinkFit fit;
  fit.interNode = local < ranks;
  Cluster c = known;
  c.devices = ranks;
  c.devicesPerNode = local;
  // Across nodes, a ring step lasts as long as its slower level, and the
  // rows cannot tell which level that was: the fitted level is taken to be
  // the slower one (a placeholder slower than any link), so the split of
  // the rows into intra and inter costs does not depend on the guess for
  // the level being fitted. Where the node link is in truth the faster,
  // the fit is the rate of the ring's slower hops.
  if (fit.interNode) c.inter = {c.intra.gbps * 1e-6, c.intra.latencyUs * 1e6 + 1e6};
  // t ≈ messages·α + bytes·β per sample, after taking off the known level.
  struct Row {
    double m, b, t;
  };
  std::vector<Row> rows;
  for (const auto& s : samples) {
    const CommCost cost = allreduceCost(s.algorithm, s.bytes, c);
    Row r{};
    if (fit.interNode) {
      CommCost intraOnly = cost;
      intraOnly.interMessages = intraOnly.interBytes = 0;
      r = {cost.interMessages, cost.interBytes, s.seconds - intraOnly.seconds(c)};
    } else {
      r = {cost.intraMessages, cost.intraBytes, s.seconds};
    }
    rows.push_back(r);
  }
  // Weighted least squares, weight 1/t² (relative errors).
  double smm = 0, smb = 0, sbb = 0, smt = 0, sbt = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double w = 1.0 / (samples[i].seconds * samples[i].seconds);
    const Row& r = rows[i];
    smm += w * r.m * r.m;
    smb += w * r.m * r.b;
    sbb += w * r.b * r.b;
    smt += w * r.m * r.t;
    sbt += w * r.b * r.t;
  }
  const double det = smm * sbb - smb * smb;
  double alpha = det != 0 ? (smt * sbb - sbt * smb) / det : 0;
  double beta = det != 0 ? (smm * sbt - smb * smt) / det : 0;
  if (alpha < 0) {  // latency below resolution: fit the bandwidth alone
    alpha = 0;
    beta = sbb > 0 ? sbt / sbb : 0;
  }
  BIGBATCH_REQUIRE(beta > 0, InvalidArgument,
                   "the fitted per-byte cost is {} (not positive): the times do not grow with "
                   "the size; measure a wider range (e.g. --max-bytes 64M)",
                   beta);
  fit.level.latencyUs = alpha * 1e6;
  fit.level.gbps = 8.0 / beta / 1e9;
  fit.samples = static_cast<int>(rows.size());
  double sumSq = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const double model = rows[i].m * alpha + rows[i].b * beta;
    const double rel = (model - rows[i].t) / samples[i].seconds;
    sumSq += rel * rel;
    fit.maxRelativeError = std::max(fit.maxRelativeError, std::abs(rel));
  }
  fit.rmsRelativeError = std::sqrt(sumSq / rows.size());
  return fit;
}

}  // namespace bigbatch::plan
