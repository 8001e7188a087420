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
