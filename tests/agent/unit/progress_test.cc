// The progress line's number formatting (the line itself only appears on a terminal).
#include "infergate/agent/verify/progress.h"

#include <gtest/gtest.h>

namespace infergate::agent {
namespace {

TEST(Progress, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(Progress::format_bytes(512), "512 B");
  EXPECT_EQ(Progress::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(Progress::format_bytes(3.0 * (1 << 30)), "3.0 GiB");
}

TEST(Progress, IsSilentAndCheapWhenDisabled) {
  Progress p("verifying", false);
  p.start(100);
  p.counter()->fetch_add(100);
  p.stop();
  p.stop();
}

}  // namespace
}  // namespace infergate::agent
