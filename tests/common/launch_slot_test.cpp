// A rank's slot under the supervisor's plan (common/launch_slot.h): the plan
// names hosts as the launcher does, a rank finds its host by its name or an
// address (host_identity.h) and takes its local rank's entry — so the plan
// holds under any mapping of ranks to hosts.
#include "bigbatch/common/launch_slot.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "bigbatch/common/error.h"
#include "bigbatch/common/host_identity.h"

namespace bigbatch {
namespace {

TEST(HostIdentity, NamesAHostByNameShortNameOrAddress) {
  const HostIdentity h{"node7.cluster", {"10.0.0.7", "fe80::1"}};
  EXPECT_TRUE(namesHost("node7.cluster", h));
  EXPECT_TRUE(namesHost("node7", h));  // a hostfile's short name
  EXPECT_TRUE(namesHost("10.0.0.7", h));
  EXPECT_TRUE(namesHost("fe80::1", h));
  EXPECT_FALSE(namesHost("node8", h));
  EXPECT_FALSE(namesHost("10.0.0.8", h));
  EXPECT_FALSE(namesHost("", h));
  // An address is compared as an address, never by its "short name".
  EXPECT_FALSE(namesHost("10.0.0.9", HostIdentity{"10", {}}));
  const HostIdentity me = thisHost();
  EXPECT_FALSE(me.name.empty());
  EXPECT_TRUE(namesHost(me.name, me));
  for (const std::string& a : me.addresses) {
    EXPECT_NE(a.rfind("127.", 0), 0u) << a;  // loopback is left out
    EXPECT_TRUE(namesHost(a, me));
  }
}

TEST(LaunchSlot, RanksTakeTheirHostsSlotsByLocalRank) {
  const auto plan = parseSlotPlan("10.0.0.7=1,2|node8=0");
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].host, "10.0.0.7");
  EXPECT_EQ(plan[0].slots, (std::vector<int>{1, 2}));
  EXPECT_EQ(formatSlotPlan(plan), "10.0.0.7=1,2|node8=0");
  const HostIdentity a{"node7", {"10.0.0.7"}}, b{"node8.cluster", {"10.0.0.8"}};
  EXPECT_EQ(slotInPlan(plan, a, 0), 1);
  EXPECT_EQ(slotInPlan(plan, a, 1), 2);
  EXPECT_EQ(slotInPlan(plan, b, 0), 0);
  EXPECT_FALSE(slotInPlan(plan, b, 1));  // more ranks on node8 than the plan gives it
  EXPECT_FALSE(slotInPlan(plan, HostIdentity{"node9", {"10.0.0.9"}}, 0));  // not in the plan
  // The one local host, unnamed: every host is it.
  const auto local = parseSlotPlan("=0,2");
  EXPECT_EQ(slotInPlan(local, a, 1), 2);
  EXPECT_THROW(parseSlotPlan("a=0,x"), InvalidArgument);
  EXPECT_THROW(parseSlotPlan("0,1"), InvalidArgument);  // no host: not the supervisor's
  ::setenv("BIGBATCH_SLOTS", "=1,2", 1);
  EXPECT_EQ(launchSlot(0), 1);
  EXPECT_EQ(launchSlot(5), 5);  // the plan does not describe this launch
  ::setenv("BIGBATCH_SLOTS", ("other=3|" + thisHost().name + "=4,6").c_str(), 1);
  EXPECT_EQ(launchSlot(1), 6);
  ::unsetenv("BIGBATCH_SLOTS");
  EXPECT_EQ(launchSlot(0), 0);
}

}  // namespace
}  // namespace bigbatch
