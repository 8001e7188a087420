// The agent's termination message.
#include "infergate/operator/api/verification.h"

#include <gtest/gtest.h>

namespace infergate::op::api {
namespace {

const std::string kDigest = "sha256:" + std::string(64, 'c');

TEST(TerminationMessage, ReadsAVerifiedRelease) {
  auto r = parse_termination_message(R"({"reason":"Verified","releaseDigest":")" + kDigest +
                                         R"(","name":"glm-4-9b","version":3,"weightFormat":"int8"})"
                                         "\n",
                                     0);
  EXPECT_TRUE(r.verified);
  EXPECT_EQ(r.release_digest, kDigest);
  EXPECT_EQ(r.name, "glm-4-9b");
  EXPECT_EQ(*r.version, 3);
}

TEST(TerminationMessage, KeepsAPublishedFormatWordWhole) {
  auto r = parse_termination_message(
      R"({"reason":"Verified","releaseDigest":")" + kDigest + R"(","weightFormat":"int4-ct-g128-asym"})", 0);
  EXPECT_EQ(r.weight_format, "int4-ct-g128-asym");
}

TEST(TerminationMessage, ReadsARefusalWithFile) {
  auto r = parse_termination_message(
      R"({"reason":"DigestMismatch","message":"digest differs","file":"model-00003.safetensors","expected":"aa","actual":"bb","exitCode":5})",
      5);
  EXPECT_FALSE(r.verified);
  EXPECT_EQ(r.reason, "DigestMismatch");
  EXPECT_EQ(r.file, "model-00003.safetensors");
  EXPECT_EQ(r.exit_code, 5);
  EXPECT_EQ(r.describe(), "DigestMismatch: digest differs (file model-00003.safetensors)");
}

TEST(TerminationMessage, GarbledVerdictsNeverCountAsVerified) {
  for (std::string text :
       {std::string(""), std::string("Killed"), std::string("{\"reason\":\"verified\"}"),
        std::string("{\"reason\":\"Verified\"}"),
        std::string("{\"reason\":\"Verified\",\"releaseDigest\":\"sha256:xyz\"}"), std::string(5000, '{')}) {
    auto r = parse_termination_message(text, 1);
    EXPECT_FALSE(r.verified) << text.substr(0, 40);
    EXPECT_EQ(r.reason, "VerificationFailed") << text.substr(0, 40);
  }
}

TEST(TerminationMessage, VerifiedWithANonZeroExitIsARefusal) {
  auto r = parse_termination_message(R"({"reason":"Verified","releaseDigest":")" + kDigest + R"("})", 3);
  EXPECT_FALSE(r.verified);
}

}  // namespace
}  // namespace infergate::op::api
