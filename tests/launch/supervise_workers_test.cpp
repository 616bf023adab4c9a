// Which rank a failed attempt's messages name: the supervisor takes a rank
// named twice in a row as lost (--min-workers), so a survivor's line that
// reaches mpirun's stderr first must still name the rank that failed.
#include <gtest/gtest.h>

#include "bigbatch/launch/supervise_workers.h"

namespace bigbatch {
namespace {

TEST(Supervisor, AnErrorLineNamesTheRankThatFailed) {
  EXPECT_EQ(failedRankIn("bigbatch: error: [rank 2] injected fault (fault.kind = throw) on rank 2 "
                         "at step 5 (during step)"),
            2);
  // A survivor's line blames its peer.
  EXPECT_EQ(failedRankIn("bigbatch: error: [rank 0] rank 2 failed: [rank 2] injected fault"), 2);
  EXPECT_EQ(failedRankIn("bigbatch: error: [rank 0] step 12: stopped answering: rank 1 on another "
                         "host (no sign of life for 10.0 s)"),
            1);
  EXPECT_EQ(failedRankIn("bigbatch: error: cannot open 'x.toml'"), -1);
}

}  // namespace
}  // namespace bigbatch
