// Release statements: what we sign reads back the same, and anything else is StatementInvalid.
#include "infergate/agent/signing/statement.h"

#include <gtest/gtest.h>

#include "common/refusal.h"

#include "infergate/common/json.h"

namespace infergate::agent {
namespace {

using infergate::testing::refused;

ReleaseStatement sample() {
  ReleaseStatement s;
  s.manifest_digest = *sha256("SHA256SUMS content");
  s.name = "glm-4-9b";
  s.version = 7;
  s.weight_format = "int8";
  s.created_at = *parse_rfc3339("2026-01-02T03:04:05Z");
  s.expires_at = *parse_rfc3339("2026-04-02T03:04:05Z");
  s.file_sizes = {{"config.json", 120}, {"shards/model-00001.safetensors", 1ull << 33}};
  return s;
}

Json sample_json() { return *parse_json(serialize_statement(sample()), "statement"); }

std::string reason(const Json& j) {
  auto s = parse_statement(j.dump());
  return s.ok() ? "ok" : s.error().reason();
}

TEST(Statement, RoundTripsEveryField) {
  auto s = parse_statement(serialize_statement(sample()));
  ASSERT_TRUE(s.ok()) << s.error().to_string();
  EXPECT_EQ(s->manifest_digest, sample().manifest_digest);
  EXPECT_EQ(s->name, "glm-4-9b");
  EXPECT_EQ(s->version, 7);
  EXPECT_EQ(s->weight_format, "int8");
  EXPECT_EQ(s->created_at, sample().created_at);
  EXPECT_EQ(s->expires_at, sample().expires_at);
  EXPECT_EQ(s->file_sizes, sample().file_sizes);
}

TEST(Statement, HasTheInTotoShape) {
  Json j = sample_json();
  EXPECT_EQ(j["_type"], "https://in-toto.io/Statement/v1");
  EXPECT_EQ(j["predicateType"], "https://infergate.dev/release/v1");
  EXPECT_EQ(j["subject"][0]["name"], "SHA256SUMS");
  EXPECT_EQ(j["subject"][0]["digest"]["sha256"], sample().manifest_digest.hex());
  EXPECT_EQ(j["predicate"]["createdAt"], "2026-01-02T03:04:05Z");
}

TEST(Statement, AcceptsAMissingExpiry) {
  Json j = sample_json();
  j["predicate"].erase("expiresAt");
  auto s = parse_statement(j.dump());
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->expires_at.has_value());
}

TEST(Statement, RefusesWrongTypes) {
  Json j = sample_json();
  j["_type"] = "https://in-toto.io/Statement/v0.1";
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["predicateType"] = "https://slsa.dev/provenance/v1";
  EXPECT_EQ(reason(j), "StatementInvalid");
  EXPECT_EQ(reason(Json::array()), "StatementInvalid");
  EXPECT_EQ(parse_statement("{").error().reason(), "StatementInvalid");
  EXPECT_EQ(parse_statement("").error().reason(), "StatementInvalid");
}

TEST(Statement, RefusesAnySubjectButOneSha256sums) {
  Json j = sample_json();
  j["subject"].push_back(j["subject"][0]);
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["subject"][0]["name"] = "model.safetensors";
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["subject"][0]["digest"]["sha256"] = std::string(63, 'a');
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["subject"][0]["digest"]["sha256"] = std::string(64, 'A');
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["subject"] = Json::array();
  EXPECT_EQ(reason(j), "StatementInvalid");
}

TEST(Statement, RefusesVersionsThatAreNotNonNegativeIntegers) {
  for (Json v : {Json(-1), Json(3.0), Json(3.5), Json("3"), Json(nullptr)}) {
    Json j = sample_json();
    j["predicate"]["version"] = v;
    EXPECT_EQ(reason(j), "StatementInvalid") << v.dump();
  }
  Json j = sample_json();
  j["predicate"]["version"] = 0;
  EXPECT_EQ(reason(j), "ok");
}

TEST(Statement, RefusesBadNamesFormatsAndTimes) {
  Json j = sample_json();
  j["predicate"]["name"] = "";
  EXPECT_EQ(reason(j), "StatementInvalid");
  j["predicate"]["name"] = "a b";
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["predicate"]["weightFormat"] = "INT8";
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["predicate"]["createdAt"] = "yesterday";
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["predicate"]["expiresAt"] = j["predicate"]["createdAt"];
  EXPECT_EQ(reason(j), "StatementInvalid");
}

TEST(Statement, RefusesBadFileSizes) {
  Json j = sample_json();
  j["predicate"]["fileSizes"]["../etc/passwd"] = 1;
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["predicate"]["fileSizes"]["./config.json"] = 1;
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["predicate"]["fileSizes"]["config.json"] = -1;
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["predicate"]["fileSizes"]["config.json"] = 1.5;
  EXPECT_EQ(reason(j), "StatementInvalid");
  j = sample_json();
  j["predicate"].erase("fileSizes");
  EXPECT_EQ(reason(j), "StatementInvalid");
}

TEST(Statement, RefusesDuplicateKeys) {
  std::string text = serialize_statement(sample());
  std::string dup = text.substr(0, text.size() - 1) + R"(,"_type":"https://in-toto.io/Statement/v1"})";
  EXPECT_EQ(parse_statement(dup).error().reason(), "StatementInvalid");
}

TEST(ValidateReleaseName, AcceptsModelIdsAndRefusesTheRest) {
  EXPECT_TRUE(validate_release_name("meta-llama/Llama-3.1-8B").ok());
  EXPECT_TRUE(validate_release_name("glm-4-9b:r3@v2+x_y").ok());
  for (const std::string& name : {std::string(), std::string(254, 'a'), std::string("new\nline")})
    EXPECT_TRUE(refused(validate_release_name(name), "UsageError", {"a model name is 1 to 253 characters"}));
  EXPECT_TRUE(validate_weight_format("fp8_e4m3").ok());
  for (const char* format : {"Int8", ""})
    EXPECT_TRUE(
        refused(validate_weight_format(format), "UsageError", {"a weight format is 1 to 32 characters"}));
}

}  // namespace
}  // namespace infergate::agent
