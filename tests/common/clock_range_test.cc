// parse_rfc3339 at the edges of what system_clock can hold (nanoseconds in 64 bits): far-future and
// far-past times are refused, never overflowed (a fuzzer found "9999-12-31T23:59:59Z").
#include <gtest/gtest.h>

#include "common/refusal.h"

#include "infergate/common/clock.h"

namespace infergate {
namespace {

using infergate::testing::refused;

TEST(ParseRfc3339, RefusesTimesSystemClockCannotHold) {
  for (const char* t : {"9999-12-31T23:59:59Z", "2300-01-01T00:00:00Z", "1000-01-01T00:00:00Z"})
    EXPECT_TRUE(refused(parse_rfc3339(t), "", {"not an RFC 3339 time", t}));
}

TEST(ParseRfc3339, AcceptsTimesWellInsideTheRange) {
  auto t = parse_rfc3339("2200-06-01T12:00:00+02:00");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(format_rfc3339(*t), "2200-06-01T10:00:00Z");
  EXPECT_EQ(format_rfc3339(*parse_rfc3339("1970-01-01T00:00:00Z")), "1970-01-01T00:00:00Z");
}

}  // namespace
}  // namespace infergate
