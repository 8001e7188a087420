// The progress line's number formatting (the line itself only appears on a terminal).
#include "infergate/agent/verify/progress.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace infergate::agent {
namespace {

TEST(Progress, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(Progress::format_bytes(512), "512 B");
  EXPECT_EQ(Progress::format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(Progress::format_bytes(3.0 * (1 << 30)), "3.0 GiB");
}

// The process's thread count, from /proc/self/status ("Threads:\t3").
int threads() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST(Progress, IsSilentAndCheapWhenDisabled) {
  const int before = threads();
  ASSERT_GT(before, 0);
  ::testing::internal::CaptureStderr();
  {
    Progress p("verifying", false);
    p.start(100);
    // Cheap: no printer thread exists, so nothing can ever be printed or woken.
    EXPECT_EQ(threads(), before);
    p.counter()->fetch_add(100);
    p.stop();
    p.stop();  // stopping twice is harmless
  }
  // Silent: not even the final line that an enabled progress writes at stop.
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(Progress, StartsItsPrinterWhenEnabledAndStopsItPromptly) {
  // The control for the test above: the thread count does see an enabled printer.
  const int before = threads();
  Progress p("verifying", true);
  p.start(100);
  EXPECT_EQ(threads(), before + 1);
  p.stop();  // a run shorter than a second prints nothing and ends without waiting the second out
  EXPECT_EQ(threads(), before);
}

}  // namespace
}  // namespace infergate::agent
