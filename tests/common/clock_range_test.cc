// parse_rfc3339 at the edges of what system_clock can hold (nanoseconds in 64 bits): far-future and
// far-past times are refused, never overflowed (a fuzzer found "9999-12-31T23:59:59Z").
#include <gtest/gtest.h>

#include "infergate/common/clock.h"

namespace infergate {
namespace {

TEST(ParseRfc3339, RefusesTimesSystemClockCannotHold) {
  EXPECT_FALSE(parse_rfc3339("9999-12-31T23:59:59Z").ok());
  EXPECT_FALSE(parse_rfc3339("2300-01-01T00:00:00Z").ok());
  EXPECT_FALSE(parse_rfc3339("1000-01-01T00:00:00Z").ok());
}

TEST(ParseRfc3339, AcceptsTimesWellInsideTheRange) {
  auto t = parse_rfc3339("2200-06-01T12:00:00+02:00");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(format_rfc3339(*t), "2200-06-01T10:00:00Z");
  EXPECT_EQ(format_rfc3339(*parse_rfc3339("1970-01-01T00:00:00Z")), "1970-01-01T00:00:00Z");
}

}  // namespace
}  // namespace infergate
