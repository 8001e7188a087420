// Structured log lines in text and JSON.
#include "infergate/common/log.h"

#include <gtest/gtest.h>

#include "infergate/common/json.h"

namespace infergate::log {
namespace {

TEST(Log, TextQuotesValuesThatNeedIt) {
  std::string line = format_line(Level::kInfo, "verified release",
                                 {{"model", "glm-4-9b"}, {"files", 12}, {"note", "a b"}}, Format::kText);
  EXPECT_NE(line.find(" info \"verified release\" model=glm-4-9b files=12 note=\"a b\"\n"), std::string::npos)
      << line;
}

TEST(Log, JsonIsOneParseableObject) {
  std::string line = format_line(Level::kError, "refused",
                                 {{"reason", "DigestMismatch"}, {"bytes", 42}, {"ok", false}}, Format::kJson);
  ASSERT_EQ(line.back(), '\n');
  auto j = parse_json(line, "log line");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ((*j)["level"], "error");
  EXPECT_EQ((*j)["reason"], "DigestMismatch");
  EXPECT_EQ((*j)["bytes"], 42);
  EXPECT_EQ((*j)["ok"], false);
}

}  // namespace
}  // namespace infergate::log
