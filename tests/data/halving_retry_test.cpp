// retryInHalves (src/data/halving_retry.h), the GPU decoder's answer to a
// failed batched nvJPEG call, on the CPU: a batch of 256 with one bad item
// costs 2 log2(256) + 1 = 17 batched calls and sends only that item to the
// per-item path; every good item is decoded once by a successful call;
// several bad items are each sent once; a good batch is one call.
#include "../../src/data/halving_retry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

namespace bigbatch::data_detail {
namespace {

struct Calls {
  std::set<size_t> bad;
  int batched = 0;
  std::vector<size_t> done;  // items a successful batched call decoded
  std::vector<std::pair<size_t, std::string>> single;

  void run(size_t n) {
    std::vector<size_t> items(n);
    std::iota(items.begin(), items.end(), 0);
    retryInHalves(
        items,
        [&](const std::vector<size_t>& some) -> std::string {
          ++batched;
          for (size_t i : some) {
            if (bad.count(i)) return "BAD_JPEG";
          }
          done.insert(done.end(), some.begin(), some.end());
          return "";
        },
        [&](size_t i, const std::string& why) { single.emplace_back(i, why); });
  }
};

TEST(HalvingRetry, AGoodBatchIsOneCall) {
  Calls c;
  c.run(256);
  EXPECT_EQ(c.batched, 1);
  EXPECT_EQ(c.done.size(), 256u);
  EXPECT_TRUE(c.single.empty());
}

TEST(HalvingRetry, OneBadItemCostsTwoLog2NCallsAndOnlyItselfGoesAlone) {
  for (size_t badItem : {size_t{0}, size_t{137}, size_t{255}}) {
    Calls c;
    c.bad = {badItem};
    c.run(256);
    EXPECT_EQ(c.batched, 17) << badItem;  // the whole, then 8 levels of two halves
    ASSERT_EQ(c.single.size(), 1u);
    EXPECT_EQ(c.single[0].first, badItem);
    EXPECT_EQ(c.single[0].second, "BAD_JPEG");
    std::vector<size_t> done = c.done;
    std::sort(done.begin(), done.end());
    EXPECT_EQ(done.size(), 255u);  // every other item, each once
    EXPECT_TRUE(std::adjacent_find(done.begin(), done.end()) == done.end());
    EXPECT_FALSE(std::binary_search(done.begin(), done.end(), badItem));
  }
}

TEST(HalvingRetry, EveryBadItemGoesAloneOnceAndNoGoodOneDoes) {
  Calls c;
  c.bad = {3, 4, 100, 101, 102, 250};
  c.run(256);
  std::vector<size_t> alone;
  for (const auto& s : c.single) alone.push_back(s.first);
  EXPECT_EQ(alone, std::vector<size_t>({3, 4, 100, 101, 102, 250}));
  EXPECT_EQ(c.done.size(), 250u);
  EXPECT_LT(c.batched, 6 * 17);  // far below 256 single decodes
}

TEST(HalvingRetry, OddSizesAndEmpty) {
  Calls c;
  c.bad = {4};
  c.run(5);
  ASSERT_EQ(c.single.size(), 1u);
  EXPECT_EQ(c.single[0].first, 4u);
  EXPECT_EQ(c.done.size(), 4u);
  Calls none;
  none.run(0);
  EXPECT_EQ(none.batched, 0);
}

}  // namespace
}  // namespace bigbatch::data_detail
