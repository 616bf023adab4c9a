// The tune search space: parsing every form and its refusals, and the draw:
// deterministic per (seed, trial), inside its bounds, and spread as asked.
#include "bigbatch/tune/search_space.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

double valueOf(const std::string& assignment) {
  return std::stod(assignment.substr(assignment.find('=') + 1));
}

TEST(SearchSpace, ParsesRangesScalesAndLists) {
  const SearchParameter a = parseSearchParameter("optim.lr=1:40:log");
  EXPECT_EQ(a.key, "optim.lr");
  EXPECT_EQ(a.kind, SearchParameter::kLogUniform);
  EXPECT_DOUBLE_EQ(a.lo, 1);
  EXPECT_DOUBLE_EQ(a.hi, 40);
  EXPECT_EQ(parseSearchParameter("optim.momentum=0.85:0.95").kind, SearchParameter::kUniform);
  EXPECT_EQ(parseSearchParameter("train.batch_size=32:256:int").kind, SearchParameter::kInteger);
  const SearchParameter c = parseSearchParameter("schedule.decay=cosine,poly,linear");
  EXPECT_EQ(c.kind, SearchParameter::kChoice);
  EXPECT_EQ(c.choices, (std::vector<std::string>{"cosine", "poly", "linear"}));
  EXPECT_EQ(parseSearchParameter("schedule.warmup_epochs=1,2,3").choices.size(), 3u);
  EXPECT_EQ(parseSearchParameter("optim.weight_decay=1e-5:1e-3:log").lo, 1e-5);
  // Lists as choices: '|' separates them, the commas stay inside.
  EXPECT_EQ(parseSearchParameter("model.widths=[16,32,64]|[24,48,96]").choices,
            (std::vector<std::string>{"[16,32,64]", "[24,48,96]"}));
}

TEST(SearchSpace, RefusesWhatItCannotDrawNamingTheParameter) {
  for (const char* bad : {"optim.lr", "=1:2", "optim.lr=", "optim.lr=2:1", "optim.lr=0:1:log",
                          "optim.lr=-1:1:log", "optim.lr=a:2", "optim.lr=1:2:exp",
                          "optim.lr=1:2:3:4", "x=0.5:3.5:int", "x=a,,b", "x=a,b,a"}) {
    try {
      parseSearchParameter(bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(SearchSpace({}), InvalidArgument);
  EXPECT_THROW(SearchSpace({parseSearchParameter("a=1:2"), parseSearchParameter("a=3,4")}),
               InvalidArgument);
}

TEST(SearchSpace, EachTrialDrawsTheSameValuesEveryTime) {
  const SearchSpace s({parseSearchParameter("optim.lr=1:40:log"),
                       parseSearchParameter("schedule.warmup_epochs=1,2,3")},
                      7);
  // A resumed search redraws trial 5 without drawing 0..4 first.
  const auto five = s.draw(5);
  for (int t = 0; t < 5; ++t) s.draw(t);
  EXPECT_EQ(s.draw(5), five);
  ASSERT_EQ(five.size(), 2u);
  EXPECT_EQ(five[0].rfind("optim.lr=", 0), 0u);
  EXPECT_EQ(five[1].rfind("schedule.warmup_epochs=", 0), 0u);
  EXPECT_NE(s.draw(6), five);
  const SearchSpace other({parseSearchParameter("optim.lr=1:40:log"),
                           parseSearchParameter("schedule.warmup_epochs=1,2,3")},
                          8);
  EXPECT_NE(other.draw(5)[0], five[0]);  // another seed, another search
}

TEST(SearchSpace, DrawsStayInBoundsAndSpreadAsAsked) {
  const SearchSpace s({parseSearchParameter("lr=1:100:log"), parseSearchParameter("m=0.8:0.9"),
                       parseSearchParameter("b=2:5:int"), parseSearchParameter("d=x,y,z")});
  int belowGeometricMean = 0, belowMid = 0;
  std::map<std::string, int> ints, words;
  const int n = 3000;
  for (int t = 0; t < n; ++t) {
    const auto v = s.draw(t);
    const double lr = valueOf(v[0]), m = valueOf(v[1]);
    ASSERT_GE(lr, 1);
    ASSERT_LE(lr, 100);
    ASSERT_GE(m, 0.8);
    ASSERT_LE(m, 0.9);
    belowGeometricMean += lr < 10;  // log-uniform: half below sqrt(1 * 100)
    belowMid += m < 0.85;
    ++ints[v[2]];
    ++words[v[3]];
  }
  // Binomial(3000, 1/2): sd 27; 5 sd = 137.
  EXPECT_NEAR(belowGeometricMean, n / 2, 137);
  EXPECT_NEAR(belowMid, n / 2, 137);
  EXPECT_EQ(ints.size(), 4u);  // b=2, 3, 4, 5 — each bound reachable
  for (const auto& [value, count] : ints) EXPECT_NEAR(count, n / 4, 120) << value;
  EXPECT_EQ(words.size(), 3u);
  for (const auto& [value, count] : words) EXPECT_NEAR(count, n / 3, 130) << value;
}

}  // namespace
}  // namespace bigbatch
