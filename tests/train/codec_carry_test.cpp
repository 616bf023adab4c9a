// A resume on another world size carries PowerSGD's error memory over
// (model_state.h, carriedCodecState): each new rank takes 1/N of the old
// ranks' sum, so what compression owes the run — the sum of the ranks'
// errors — is kept; Q and the step count are rank 0's.
#include <gtest/gtest.h>

#include "bigbatch/ckpt/background_writer.h"
#include "run/model_state.h"

namespace bigbatch::train_detail {
namespace {

TEST(CodecCarry, TheNewRanksErrorMemoriesAddUpToTheOldOnes) {
  const torch::Tensor q = torch::randn({5, 2});
  std::vector<NamedTensors> old;
  for (int r = 0; r < 3; ++r) {
    old.push_back({{"powersgd/steps", torch::tensor({int64_t{7}})},
                   {"powersgd/q/w", r == 0 ? q : torch::randn({5, 2})},
                   {"powersgd/error/w", torch::full({6, 5}, r + 1.0f)}});
  }
  const NamedTensors carried = carriedCodecState(old, 2);
  ASSERT_EQ(carried.size(), 3u);
  for (const auto& [name, value] : carried) {
    if (name == "powersgd/q/w") {
      EXPECT_TRUE(torch::equal(value, q));
    } else if (name == "powersgd/steps") {
      EXPECT_EQ(value.item<int64_t>(), 7);
    } else if (name == "powersgd/error/w") {
      // (1 + 2 + 3) / 2 on each of 2 ranks: 6 in all, as before.
      EXPECT_TRUE(torch::equal(value, torch::full({6, 5}, 3.0f)));
    } else {
      ADD_FAILURE() << "an entry not carried before: " << name;
    }
  }
}

}  // namespace
}  // namespace bigbatch::train_detail

namespace bigbatch::train_detail {
namespace {

// A checkpoint's parameters are the live tensors, not copies: the
// synchronous write needs none, and the background one's snapshot
// (ckpt/background_writer.h, snapshotCheckpoint) makes the one copy — on a
// GPU one device copy, where namedTensors used to clone every parameter
// first and the snapshot cloned them again (outside review).
TEST(ModelState, ACheckpointsParametersAreTheLiveTensorsUntilTheSnapshotCopiesThem) {
  torch::nn::Linear layer(4, 3);
  const NamedTensors named = namedTensors(layer->named_parameters());
  ASSERT_EQ(named.size(), 2u);
  for (const auto& [name, t] : named) {
    EXPECT_EQ(t.data_ptr(), layer->named_parameters()[name].data_ptr()) << name;
    EXPECT_FALSE(t.requires_grad()) << name;  // detached
  }
  Checkpoint k;
  k.parameters = named;
  const Checkpoint snap = snapshotCheckpoint(k).checkpoint;
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_NE(snap.parameters[i].second.data_ptr(), named[i].second.data_ptr());
    EXPECT_TRUE(torch::equal(snap.parameters[i].second, named[i].second));
  }
}

}  // namespace
}  // namespace bigbatch::train_detail
