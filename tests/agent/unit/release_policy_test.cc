// The release policy: name, rollback, expiry (on a fake clock) and weight format.
#include "infergate/agent/policy/release_policy.h"

#include <gtest/gtest.h>

namespace infergate::agent {
namespace {

using namespace std::chrono_literals;

ReleaseStatement statement() {
  ReleaseStatement s;
  s.name = "glm-4-9b";
  s.version = 3;
  s.weight_format = "int8";
  s.created_at = *parse_rfc3339("2026-01-01T00:00:00Z");
  s.expires_at = s.created_at + 24h;
  return s;
}

std::string reason(const ReleasePolicy& p, WallTime now = *parse_rfc3339("2026-01-01T01:00:00Z")) {
  auto st = check_release_policy(statement(), p, now);
  return st.ok() ? "ok" : st.error().reason();
}

TEST(ReleasePolicy, AcceptsWhatItIsAskedFor) {
  EXPECT_EQ(reason({}), "ok");
  EXPECT_EQ(reason({"glm-4-9b", 3, "int8"}), "ok");
  EXPECT_EQ(reason({"glm-4-9b", 0, std::nullopt}), "ok");
}

TEST(ReleasePolicy, RefusesAnotherModelName) {
  auto st = check_release_policy(statement(), {"glm-4-32b", std::nullopt, std::nullopt},
                                 *parse_rfc3339("2026-01-01T01:00:00Z"));
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason(), "NameMismatch");
  EXPECT_EQ(st.error().detail("expected"), "glm-4-32b");
  EXPECT_EQ(st.error().detail("actual"), "glm-4-9b");
}

TEST(ReleasePolicy, RefusesAVersionBelowTheMinimum) {
  EXPECT_EQ(reason({std::nullopt, 4, std::nullopt}), "VersionTooLow");
}

TEST(ReleasePolicy, RefusesAnExpiredStatementOnAFakeClock) {
  FakeClock clock(*parse_rfc3339("2026-01-01T00:00:00Z"));
  EXPECT_TRUE(check_release_policy(statement(), {}, clock.wall_now()).ok());
  clock.advance(24h - 1s);
  EXPECT_TRUE(check_release_policy(statement(), {}, clock.wall_now()).ok());
  clock.advance(1s);
  auto st = check_release_policy(statement(), {}, clock.wall_now());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().reason(), "ReleaseExpired");
}

TEST(ReleasePolicy, RefusesAnotherWeightFormat) {
  EXPECT_EQ(reason({std::nullopt, std::nullopt, "int4"}), "WeightFormatMismatch");
}

}  // namespace
}  // namespace infergate::agent
