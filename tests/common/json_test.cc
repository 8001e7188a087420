// Exception-free JSON parsing and typed access with errors naming the field.
#include "infergate/common/json.h"

#include <gtest/gtest.h>

namespace infergate {
namespace {

TEST(Json, ParseErrorNamesTheSourceAndPosition) {
  auto r = parse_json("{\"a\": 1,,}", "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("config.json: not valid JSON at byte"), std::string::npos);
  EXPECT_EQ(r.error().reason(), "InvalidJson");
}

TEST(Json, TypedAccessNamesThePath) {
  auto j = *parse_json(R"({"serving": {"maxConcurrency": "lots", "n": 3, "f": 2.0, "x": 2.5}})", "spec");
  const Json& serving = j["serving"];
  auto bad = json_int(serving, "maxConcurrency", "spec.serving");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(), "spec.serving.maxConcurrency: expected an integer");
  EXPECT_EQ(*json_int(serving, "n"), 3);
  EXPECT_EQ(*json_int(serving, "f"), 2);
  EXPECT_FALSE(json_int(serving, "x").ok());
  auto missing = json_string(serving, "weightFormat", "spec.serving");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().reason(), "MissingField");
  EXPECT_EQ(*json_string_or(serving, "weightFormat", "fp16"), "fp16");
  EXPECT_FALSE(json_string_or(serving, "n", "x").ok());
}

TEST(Json, DumpReplacesInvalidUtf8InsteadOfThrowing) {
  Json j = std::string("a\xff");
  EXPECT_NO_THROW((void)dump_json(j));
}

}  // namespace
}  // namespace infergate
