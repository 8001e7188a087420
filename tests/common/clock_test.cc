// Clocks, RFC 3339 and durations.
#include "infergate/common/clock.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include <thread>

namespace infergate {
namespace {

using infergate::testing::refused;

using namespace std::chrono_literals;

TEST(Rfc3339, RoundTripsAndAcceptsOffsets) {
  auto t = *parse_rfc3339("2026-11-29T19:30:00Z");
  EXPECT_EQ(format_rfc3339(t), "2026-11-29T19:30:00Z");
  EXPECT_EQ(*parse_rfc3339("2026-11-29T20:30:00+01:00"), t);
  EXPECT_EQ(format_rfc3339(*parse_rfc3339("2026-11-29T19:30:00.123456Z")), "2026-11-29T19:30:00Z");
}

TEST(Rfc3339, RefusesMalformedTimes) {
  for (const char* s : {"", "2026-11-29", "2026-13-01T00:00:00Z", "2026-11-29T19:30:00",
                        "2026-11-29T19:30:00Zjunk", "2026-11-29 19:30:00Z"}) {
    EXPECT_TRUE(refused(parse_rfc3339(s), "", {"not an RFC 3339 time"})) << s;
  }
}

TEST(Duration, ParsesUnitsAndRefusesGarbage) {
  EXPECT_EQ(*parse_duration("90s"), 90s);
  EXPECT_EQ(*parse_duration("1h30m"), 5400s);
  EXPECT_EQ(*parse_duration("30d"), std::chrono::seconds(30 * 86400));
  EXPECT_TRUE(refused(parse_duration(""), "", {"empty duration"}));
  EXPECT_TRUE(refused(parse_duration("5x"), "", {"unknown duration unit 'x'"}));
  for (const char* s : {"10", "-5s", "h"}) EXPECT_TRUE(refused(parse_duration(s), "", {"duration", s})) << s;
}

TEST(FakeClock, SleepReturnsOnlyAfterAdvance) {
  FakeClock clock;
  auto start = clock.mono_now();
  std::atomic<bool> woke{false};
  std::thread t([&] {
    clock.sleep_for(10s);
    woke = true;
  });
  while (clock.sleepers() == 0) std::this_thread::yield();
  clock.advance(5s);
  std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(woke);
  clock.advance(5s);
  t.join();
  EXPECT_TRUE(woke);
  EXPECT_EQ(clock.mono_now() - start, 10s);
}

}  // namespace
}  // namespace infergate
