// Fitting α and β: recovered exactly from times the model itself produced,
// and the parsing of `bench allreduce --json` rows.
#include "bigbatch/plan/calibration.h"

#include <gtest/gtest.h>

#include "bigbatch/common/error.h"
#include "bigbatch/plan/allreduce_cost.h"

namespace bigbatch::plan {
namespace {

std::vector<AllreduceSample> modelled(const Cluster& c,
                                      const std::vector<std::string>& algorithms) {
  std::vector<AllreduceSample> samples;
  for (const auto& a : algorithms)
    for (double bytes = 1024; bytes <= 64e6; bytes *= 4)
      samples.push_back(
          {a, c.devices, c.devicesPerNode, bytes, allreduceCost(a, bytes, c).seconds(c)});
  return samples;
}

TEST(Calibration, RecoversTheIntraNodeLink) {
  Cluster truth;
  truth.devices = 4;
  truth.devicesPerNode = 4;
  truth.intra = {37.5, 1.25};
  const LinkFit fit = fitLink(modelled(truth, {"ring", "halving_doubling"}), Cluster{});
  EXPECT_FALSE(fit.interNode);
  EXPECT_NEAR(fit.level.gbps, 37.5, 1e-6);
  EXPECT_NEAR(fit.level.latencyUs, 1.25, 1e-6);
  EXPECT_LT(fit.maxRelativeError, 1e-9);
}

TEST(Calibration, RecoversTheInterNodeLinkGivenTheIntraNodeOne) {
  Cluster truth;
  truth.devices = 4;
  truth.devicesPerNode = 2;
  truth.intra = {200, 2};
  truth.inter = {10, 30};
  Cluster known = truth;
  known.inter = {100, 5};  // a wrong guess, replaced by the fit
  const LinkFit fit = fitLink(modelled(truth, {"ring", "recursive_doubling"}), known);
  EXPECT_TRUE(fit.interNode);
  EXPECT_NEAR(fit.level.gbps, 10, 1e-6);
  EXPECT_NEAR(fit.level.latencyUs, 30, 1e-6);
}

// The guess for the level being fitted does not decide how the rows split:
// a guess faster than the intra-node link used to charge the ring's steps
// to that link, and the fit then had nothing of the node link to fit.
TEST(Calibration, TheFitOfTheInterNodeLinkDoesNotDependOnItsGuess) {
  Cluster truth;
  truth.devices = 8;
  truth.devicesPerNode = 4;
  truth.intra = {200, 2};
  truth.inter = {25, 20};
  const auto rows = modelled(truth, {"ring"});
  for (const LinkLevel guess : {LinkLevel{1, 50}, LinkLevel{25, 20}, LinkLevel{150, 5},
                                LinkLevel{1000, 1}}) {
    Cluster known = truth;
    known.inter = guess;
    LinkFit fit;
    ASSERT_NO_THROW(fit = fitLink(rows, known)) << "guess " << guess.gbps << " Gb/s";
    EXPECT_NEAR(fit.level.gbps, 25, 1e-6) << "guess " << guess.gbps << " Gb/s";
    EXPECT_NEAR(fit.level.latencyUs, 20, 1e-6) << "guess " << guess.gbps << " Gb/s";
  }
}

TEST(Calibration, ParsesBenchRowsAndSkipsOthers) {
  const std::string text =
      "# a header line\n"
      R"({"algorithm":"memcpy","ranks":2,"local_ranks":2,"bytes":1024,"time_us":0.1})"
      "\n"
      R"({"algorithm":"ring","ranks":2,"local_ranks":2,"bytes":1024,"count":256,"type":"float32","time_us":3.5,"algbw":0.3,"busbw":0.3,"wrong":0})"
      "\n"
      R"({"algorithm":"shm","ranks":2,"local_ranks":2,"bytes":1024,"time_us":1.0})"
      "\n";
  const auto samples = parseBenchRows(text);
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].algorithm, "ring");
  EXPECT_EQ(samples[0].ranks, 2);
  EXPECT_EQ(samples[0].bytes, 1024);
  EXPECT_DOUBLE_EQ(samples[0].seconds, 3.5e-6);
  EXPECT_THROW(parseBenchRows(R"({"algorithm":"ring","ranks":2})"), IoError);
}

TEST(Calibration, OneSizeCannotSeparateAlphaFromBeta) {
  std::vector<AllreduceSample> one = {{"ring", 2, 2, 4096, 1e-5}, {"ring", 2, 2, 4096, 1.1e-5}};
  try {
    fitLink(one, Cluster{});
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("at least two"), std::string::npos) << e.what();
  }
}

TEST(Calibration, TimesThatDoNotGrowAreRefused) {
  std::vector<AllreduceSample> flat = {{"ring", 2, 2, 1024, 2e-5}, {"ring", 2, 2, 1 << 20, 1e-5}};
  EXPECT_THROW(fitLink(flat, Cluster{}), InvalidArgument);
}

}  // namespace
}  // namespace bigbatch::plan
