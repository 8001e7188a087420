// YAML to JSON with core-schema typing.
#include "infergate/operator/api/yaml.h"

#include <gtest/gtest.h>

namespace infergate::op::api {
namespace {

TEST(Yaml, TypesPlainScalarsAndKeepsQuotedOnesStrings) {
  auto j = parse_yaml("a: 1\nb: \"1\"\nc: true\nd: 'true'\ne: 1.5\nf: ~\ng: int8\nh: 0x10\n", "t");
  ASSERT_TRUE(j.ok()) << j.error().to_string();
  EXPECT_EQ((*j)["a"], 1);
  EXPECT_EQ((*j)["b"], "1");
  EXPECT_EQ((*j)["c"], true);
  EXPECT_EQ((*j)["d"], "true");
  EXPECT_EQ((*j)["e"], 1.5);
  EXPECT_TRUE((*j)["f"].is_null());
  EXPECT_EQ((*j)["g"], "int8");
  EXPECT_EQ((*j)["h"], 16);
}

TEST(Yaml, SplitsDocumentsAndSkipsEmptyOnes) {
  auto docs = parse_yaml_documents("---\na: 1\n---\n---\nb: [1, 2]\n", "t");
  ASSERT_TRUE(docs.ok());
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[1]["b"][1], 2);
}

TEST(Yaml, SyntaxErrorsNameTheSourceAndLine) {
  auto j = parse_yaml("a: 1\nb: [1, 2\n", "model.yaml");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.error().message().find("model.yaml: line"), std::string::npos) << j.error().message();
}

TEST(Yaml, RefusesDuplicateKeys) {
  auto j = parse_yaml("a: 1\na: 2\n", "t");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.error().message().find("duplicate key"), std::string::npos);
}

// "Billion laughs": nine levels of ten aliases each would expand to 10^9 strings from under 1 KiB.
TEST(Yaml, RefusesAliasesThatExpandBeyondTheBudget) {
  std::string text = "a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int i = 1; i <= 9; ++i) {
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) text += std::string(k ? ", " : "") + "*a" + std::to_string(i - 1);
    text += "]\n";
  }
  auto j = parse_yaml(text, "laughs.yaml");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.error().reason(), "YamlTooLarge");
  EXPECT_NE(j.error().message().find("laughs.yaml: YAML aliases expand to more than"), std::string::npos)
      << j.error().message();
  // A long scalar aliased many times is bounded the same way (bytes count, not only nodes).
  std::string big = "s: &s " + std::string(50000, 'x') + "\nl: [";
  for (int k = 0; k < 100; ++k) big += std::string(k ? ", " : "") + "*s";
  big += "]\n";
  auto b = parse_yaml(big, "big.yaml");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().reason(), "YamlTooLarge");
}

TEST(Yaml, KeepsAliasesThatExpandModestly) {
  auto j = parse_yaml("base: &b {weightFormat: int8, maxConcurrency: 16}\nstable: *b\ncanary: *b\n", "t");
  ASSERT_TRUE(j.ok()) << j.error().to_string();
  EXPECT_EQ((*j)["canary"]["maxConcurrency"], 16);
}

TEST(Yaml, RefusesTextsOverTheSizeLimitBeforeParsingThem) {
  const std::string text = "a: \"" + std::string(kMaxYamlBytes, 'x') + "\"\n";
  auto j = parse_yaml(text, "huge.yaml");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.error().reason(), "YamlTooLarge");
  EXPECT_NE(j.error().message().find("huge.yaml: "), std::string::npos);
}

TEST(Yaml, RefusesTextThatIsNotUtf8) {
  // Strings go on as JSON: a byte that is not UTF-8 would make writing them fail later, far from here.
  auto j = parse_yaml("name: \"gl\xffm\"\n", "bad.yaml");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.error().message(), "bad.yaml: not valid UTF-8");
  EXPECT_TRUE(parse_yaml("name: \"gl\xc3\xa9m\"\n", "ok.yaml").ok());
}

TEST(Yaml, RefusesNestingDeeperThanTheLimit) {
  auto j = parse_yaml(std::string(200, '[') + std::string(200, ']'), "deep.yaml");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.error().message().find("deep.yaml"), std::string::npos) << j.error().message();
}

TEST(Yaml, EmitsYamlThatReadsBackEqual) {
  Json v = {{"name", "glm"},
            {"n", 3},
            {"ok", true},
            {"s", "true"},
            {"num", "0123"},
            {"list", {"a: b", "", "x"}},
            {"nested", {{"k", nullptr}, {"f", 0.5}}}};
  auto back = parse_yaml(to_yaml(v), "t");
  ASSERT_TRUE(back.ok()) << to_yaml(v);
  EXPECT_EQ(*back, v) << to_yaml(v);
}

}  // namespace
}  // namespace infergate::op::api
