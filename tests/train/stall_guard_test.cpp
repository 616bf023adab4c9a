// Which failures the trainer names the stalled rank for (the heartbeat's
// diagnosis appended to the message): a peer that kept this rank waiting
// past its deadline, and one that went away under an asynchronous
// collective — NCCL's error when a remote rank is gone, which used to be a
// plain Error and so named no rank. A rank's own error blames nobody.
#include "watch/stall_guard.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "bigbatch/common/error.h"

namespace bigbatch::train_detail {
namespace {

TEST(StallGuard, APeerIsBlamedForADeadlineAndForAPeerThatWentAway) {
  EXPECT_TRUE(blamesAPeer(TimeoutError("the gradient allreduce did not complete within 30 s")));
  EXPECT_TRUE(blamesAPeer(PeerError("NCCL failed in the gradient allreduce on rank 0")));
  EXPECT_FALSE(blamesAPeer(Error("loss is not finite at step 3")));
  EXPECT_FALSE(blamesAPeer(InvalidArgument("bad key")));
  EXPECT_FALSE(blamesAPeer(MismatchError("rank 1 failed: out of memory")));
  EXPECT_FALSE(blamesAPeer(std::runtime_error("other")));
}

}  // namespace
}  // namespace bigbatch::train_detail
