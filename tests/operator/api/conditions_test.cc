// Condition transitions per the API conventions.
#include "infergate/operator/api/conditions.h"

#include <gtest/gtest.h>

namespace infergate::op::api {
namespace {

using namespace std::chrono_literals;

TEST(Conditions, TransitionTimeMovesOnlyWhenStatusFlips) {
  std::vector<Condition> cs;
  WallTime t0 = *parse_rfc3339("2026-01-01T00:00:00Z");
  EXPECT_TRUE(set_condition(cs, {"Ready", "False", "WaitingForReplicas", "0/2", 1, {}}, t0));
  EXPECT_FALSE(set_condition(cs, {"Ready", "False", "WaitingForReplicas", "1/2", 1, {}}, t0 + 10s));
  EXPECT_EQ(cs[0].last_transition_time, t0);
  EXPECT_EQ(cs[0].message, "1/2");
  EXPECT_TRUE(set_condition(cs, {"Ready", "True", "Serving", "2/2", 2, {}}, t0 + 20s));
  EXPECT_EQ(cs[0].last_transition_time, t0 + 20s);
  EXPECT_EQ(cs[0].observed_generation, 2);
  ASSERT_EQ(cs.size(), 1u);
}

TEST(Conditions, TimesAreTruncatedToSecondsLikeMetav1Time) {
  std::vector<Condition> cs;
  WallTime t = *parse_rfc3339("2026-01-01T00:00:00Z") + 750ms;
  set_condition(cs, {"Verified", "True", "Verified", "", 1, {}}, t);
  EXPECT_EQ(cs[0].last_transition_time, *parse_rfc3339("2026-01-01T00:00:00Z"));
}

TEST(Conditions, RemoveAndFind) {
  std::vector<Condition> cs;
  set_condition(cs, {"Ready", "True", "Serving", "", 1, {}}, WallTime{});
  set_condition(cs, {"Verified", "True", "Verified", "", 1, {}}, WallTime{});
  ASSERT_NE(find_condition(cs, "Verified"), nullptr);
  EXPECT_TRUE(remove_condition(cs, "Verified"));
  EXPECT_FALSE(remove_condition(cs, "Verified"));
  EXPECT_EQ(find_condition(cs, "Verified"), nullptr);
}

}  // namespace
}  // namespace infergate::op::api
